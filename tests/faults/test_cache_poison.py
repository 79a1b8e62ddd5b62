"""A poisoned cache entry is quarantined and rebuilt, with a warning naming what differed;
a tampered artefact never runs and never blocks the next run."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import pytest
from run_helpers import FAST_MEASURE, small_convnet, write_suite

from guard.backends import get_backend
from guard.cli.main import main
from guard.run.cache_check import HASHES, poisoned


def _suite(tmp_path: Path, backend: str) -> Path:
    model = small_convnet(tmp_path / "c.onnx")
    return write_suite(
        tmp_path,
        f"""
    schema_version: 1
    suite: poison
    defaults:
      backends: [{backend}]
      measure: {FAST_MEASURE}
    models:
      - name: m
        source: {model}
        inputs: {{x: {{shape: [1, 3, 16, 16]}}}}
    """,
    )


def _run(suite: Path, out: Path, capsys) -> tuple[int, dict, str]:
    code = main(["run", str(suite), "--no-track", "--json", str(out)])
    err = capsys.readouterr().err
    return code, json.loads(out.read_text())["results"][0], err


def _flip(path: Path) -> None:
    b = bytearray(path.read_bytes())
    b[len(b) // 2] ^= 0xFF
    path.write_bytes(bytes(b))


def _rewrite_hashes(art: Path, name: str) -> None:
    doc = json.loads((art / HASHES).read_text())
    doc["files"][name] = hashlib.sha256((art / name).read_bytes()).hexdigest()
    (art / HASHES).write_text(json.dumps(doc))


@pytest.mark.slow
def test_an_edited_kernel_with_matching_hashes_is_quarantined_and_rebuilt(
    tmp_path, workdir, capsys
):
    suite = _suite(tmp_path, "bundled")
    code, first, _ = _run(suite, tmp_path / "r1.json", capsys)
    assert code == 0, first.get("error")
    art = Path(first["artefact"])
    before = (art / "kernels.o").read_bytes()
    _flip(art / "kernels.o")
    _rewrite_hashes(art, "kernels.o")  # hashes.json agrees with the edit; artefact.json does not

    code, second, err = _run(suite, tmp_path / "r2.json", capsys)
    assert code == 0 and second["verdict"] == "pass", second.get("error")
    assert second["artefact_reused"] is False and second["artefact"] == str(art)
    warning = next(x for x in err.splitlines() if "poisoned" in x)
    assert "kernels.o" in warning and "sha256 mismatch" in warning and "quarantine" in warning
    (moved,) = (workdir / ".guard" / "quarantine").iterdir()
    assert (moved / "kernels.o").read_bytes() != before  # the poisoned one, kept to look at
    assert (art / "kernels.o").read_bytes() == before  # rebuilt: the same code again

    code, third, err = _run(suite, tmp_path / "r3.json", capsys)
    assert code == 0 and third["artefact_reused"] is True and "poisoned" not in err


@pytest.mark.slow
def test_a_payload_edited_behind_hashes_json_is_quarantined(tmp_path, workdir, capsys):
    suite = _suite(tmp_path, "onnxruntime")
    code, first, _ = _run(suite, tmp_path / "r1.json", capsys)
    assert code == 0, first.get("error")
    art = Path(first["artefact"])
    payload = art / json.loads((art / "build.json").read_text())["payload"]
    _flip(payload)
    code, second, err = _run(suite, tmp_path / "r2.json", capsys)
    assert code == 0 and second["artefact_reused"] is False, second.get("error")
    warning = next(x for x in err.splitlines() if "poisoned" in x)
    assert f"{payload.name} differs from hashes.json" in warning, warning
    assert len(list((workdir / ".guard" / "quarantine").iterdir())) == 1


def test_what_differs_is_named(tmp_path):
    from guard.run.cache_check import write_hashes

    art = tmp_path / "a"
    art.mkdir()
    (art / "p.bin").write_bytes(b"abc")
    assert write_hashes(art)
    ort = get_backend("onnxruntime")
    assert poisoned(art, ort) is None
    (art / "extra").write_bytes(b"x")
    assert poisoned(art, ort) == "extra is not recorded in hashes.json (added after the build)"
    (art / "extra").unlink()
    (art / "p.bin").unlink()
    assert poisoned(art, ort) == "p.bin is missing (recorded in hashes.json)"
    (art / HASHES).write_text("{")
    assert poisoned(art, ort).startswith("hashes.json is unreadable")
