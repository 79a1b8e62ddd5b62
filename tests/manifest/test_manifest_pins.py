"""Manifest building, hash stability and sensitivity, the store, and tamper detection."""

from __future__ import annotations

import copy
import hashlib
import json
from pathlib import Path
from typing import Any

import pytest

from guard.core.errors import UsageError
from guard.manifest import (
    PINNED_FIELDS,
    ManifestError,
    artefact_dir,
    artefact_key,
    build_manifest,
    canonical_json,
    is_pinned,
    load_manifest,
    manifest_sha256,
    write_manifest,
)

DRIVER = {
    "kernel": "6.8.0-1019-gcp",
    "cpu": "Intel(R) Xeon(R) Platinum 8581C",
    "microcode": "0x21000230",
    "blas": {"name": "scipy-openblas", "version": "0.3.31", "config": "OpenBLAS 0.3.31"},
    "gpu": None,
}
HOST = {"arch": "x86_64", "cpu": "Intel(R) Xeon(R) Platinum 8581C", "cores": 2, "threads": 1}
GUARD = {"version": "0.1.0", "commit": "a" * 40, "dirty": False}
TUNING = {"path": "/c/t.json", "sha256": "b" * 64, "entries": 10, "hits": 9, "misses": 1}


@pytest.fixture
def model(tmp_path: Path) -> Path:
    p = tmp_path / "m.onnx"
    p.write_bytes(b"model bytes")
    return p


def make(model: Path, x86_root: Path, **over: Any) -> dict[str, Any]:
    kw: dict[str, Any] = dict(
        compiler={"name": "onnxruntime", "version": "1.32.0"},
        runtime={"name": "onnxruntime", "version": "1.32.0"},
        target_raw="llvm -mtriple=x86_64-linux-gnu -mcpu=x86-64-v3",
        threads=1,
        model_path=model,
        model_opset=17,
        model_inputs={"x": {"dtype": "float32", "shape": (1, 3, 224, 224)}},
        tuning_cache=TUNING,
        root=x86_root,
        driver=DRIVER,
        host=HOST,
        guard_info=GUARD,
    )
    kw.update(over)
    return build_manifest(**kw)


def test_shape_and_hash_over_the_pinned_fields(model: Path, x86_root: Path) -> None:
    m = make(model, x86_root)
    assert m["schema_version"] == 1
    assert m["target"] == {
        "raw": "llvm -mtriple=x86_64-linux-gnu -mcpu=x86-64-v3",
        "canonical": "llvm -mcpu=x86-64-v3 -mtriple=x86_64-linux-gnu",
    }
    assert m["model"] == {
        "sha256": hashlib.sha256(b"model bytes").hexdigest(),
        "opset": 17,
        "inputs": {"x": {"dtype": "float32", "shape": [1, 3, 224, 224]}},
    }
    # The hash, recomputed here by hand from the documented recipe.
    pins = {
        "compiler": m["compiler"], "runtime": m["runtime"], "driver": DRIVER,
        "target.canonical": m["target"]["canonical"], "tuning_cache.sha256": "b" * 64,
        "model.sha256": m["model"]["sha256"], "model.inputs": m["model"]["inputs"],
        "host.arch": "x86_64", "host.cpu": HOST["cpu"], "host.threads": 1,
    }  # fmt: skip
    text = json.dumps(pins, sort_keys=True, separators=(",", ":"))
    assert m["sha256"] == hashlib.sha256(text.encode()).hexdigest()
    assert m["sha256"] == make(model, x86_root)["sha256"]  # stable


def test_no_tuning_cache_gives_explicit_nulls(model: Path, x86_root: Path) -> None:
    m = make(model, x86_root, tuning_cache=None)
    assert m["tuning_cache"] == {
        "path": None, "sha256": None, "entries": None, "hits": None, "misses": None,
    }  # fmt: skip


def test_default_captures_fill_every_section(model: Path) -> None:
    m = build_manifest(
        compiler={"name": "c", "version": "1"}, runtime={"name": "r", "version": "2"},
        target_raw="host", threads=2, model_path=model, model_opset=13,
        model_inputs={}, tuning_cache=None,
    )  # fmt: skip
    assert m["host"]["threads"] == 2
    assert set(m["driver"]) == {"kernel", "cpu", "microcode", "blas", "gpu"}
    assert set(m["guard"]) == {"version", "commit", "dirty"}
    path = model.parent / "manifest.json"
    write_manifest(path, m)
    assert load_manifest(path) == m


def _set(m: dict[str, Any], dotted: str, value: Any) -> None:
    *path, last = dotted.split(".")
    for p in path:
        m = m[p]
    m[last] = value


@pytest.mark.parametrize(
    ("field", "value"),
    [
        ("compiler.version", "1.33.0"),
        ("compiler.opt_level", "O3"),  # a backend pinning more
        ("runtime.version", "1.31.1"),
        ("driver.kernel", "6.9.0"),
        ("driver.microcode", "0x21000231"),
        ("driver.blas.version", "0.3.30"),
        ("driver.gpu", {"vendor": "nvidia", "driver": "570.86.15", "cuda": "12.8"}),
        ("target.canonical", "llvm -mcpu=x86-64-v4 -mtriple=x86_64-linux-gnu"),
        ("tuning_cache.sha256", "c" * 64),
        ("model.sha256", "d" * 64),
        ("model.inputs.x.shape", [8, 3, 224, 224]),
        ("host.arch", "aarch64"),
        ("host.cpu", "Neoverse-N1"),
        ("host.threads", 2),
    ],
)
def test_changing_a_pin_changes_the_hash(
    model: Path, x86_root: Path, field: str, value: Any
) -> None:
    m = make(model, x86_root)
    changed = copy.deepcopy(m)
    _set(changed, field, value)
    assert is_pinned(field)
    assert manifest_sha256(changed) != m["sha256"]


@pytest.mark.parametrize(
    ("field", "value"),
    [
        ("target.raw", "llvm -mcpu=x86-64-v3"),
        ("tuning_cache.path", "/elsewhere/t.json"),
        ("tuning_cache.hits", 0),
        ("tuning_cache.misses", 10),
        ("tuning_cache.entries", 11),
        ("model.opset", 18),
        ("host.cores", 64),
        ("guard.commit", "e" * 40),
        ("guard.dirty", True),
        ("guard.version", "0.2.0"),
    ],
)
def test_changing_a_recorded_fact_keeps_the_hash(
    model: Path, x86_root: Path, field: str, value: Any
) -> None:
    m = make(model, x86_root)
    changed = copy.deepcopy(m)
    _set(changed, field, value)
    assert not is_pinned(field)
    assert manifest_sha256(changed) == m["sha256"]


def test_two_spellings_of_one_target_pin_alike(model: Path, x86_root: Path) -> None:
    a = make(model, x86_root, target_raw="llvm -mtriple=x86_64-linux-gnu -mcpu=x86-64-v3")
    b = make(model, x86_root, target_raw={"mcpu": "x86-64-v3", "mtriple": "x86_64-pc-linux-gnu"})
    assert a["sha256"] == b["sha256"]


def test_pinned_fields_are_listed_once() -> None:
    assert len(set(PINNED_FIELDS)) == len(PINNED_FIELDS)
    assert "guard" not in {f.split(".")[0] for f in PINNED_FIELDS}


def test_canonical_json() -> None:
    assert canonical_json({"b": 1, "a": [1, 2], "c": "é"}) == '{"a":[1,2],"b":1,"c":"é"}'.encode()
    with pytest.raises(ValueError):
        canonical_json({"x": float("nan")})


# -- content addresses --------------------------------------------------------------------


def test_artefact_key_is_pins_plus_options(model: Path, x86_root: Path) -> None:
    m = make(model, x86_root)
    k = artefact_key(m, {"opt_level": 99, "ep": "cpu"})
    assert k == artefact_key(copy.deepcopy(m), {"ep": "cpu", "opt_level": 99})
    assert k.startswith(m["sha256"][:16] + "-")
    other_opts = artefact_key(m, {"opt_level": 1, "ep": "cpu"})
    assert other_opts != k and other_opts.split("-")[0] == k.split("-")[0]
    assert artefact_key(m) == artefact_key(m, {})
    bumped = make(model, x86_root, runtime={"name": "onnxruntime", "version": "1.33.0"})
    assert artefact_key(bumped, {"opt_level": 99, "ep": "cpu"}) != k
    unpinned = make(model, x86_root, guard_info={**GUARD, "commit": "f" * 40})
    assert artefact_key(unpinned, {"opt_level": 99, "ep": "cpu"}) == k  # reused
    with pytest.raises(ValueError, match="sha256"):
        artefact_key({"compiler": {}})


def test_artefact_dir_stays_inside_root(tmp_path: Path) -> None:
    d = artefact_dir(tmp_path, "resnet50", "onnxruntime", "abc-def")
    assert d == tmp_path / "resnet50" / "onnxruntime" / "abc-def"
    odd = artefact_dir(tmp_path, "../../etc/x", "a/b", "k")
    assert odd.resolve().is_relative_to(tmp_path.resolve())
    assert len(odd.relative_to(tmp_path).parts) == 3
    with pytest.raises(UsageError, match="model name '..'"):
        artefact_dir(tmp_path, "..", "onnxruntime", "k")


# -- on disk ------------------------------------------------------------------------------


def test_write_then_load_round_trips_atomically(
    model: Path, x86_root: Path, tmp_path: Path
) -> None:
    m = make(model, x86_root)
    path = tmp_path / "art" / "manifest.json"
    written = write_manifest(path, m)
    assert written == m
    assert load_manifest(path) == m
    assert sorted(p.name for p in path.parent.iterdir()) == ["manifest.json"]  # no temp left


def test_write_reseals_after_a_pin_is_filled_in(
    model: Path, x86_root: Path, tmp_path: Path
) -> None:
    m = make(model, x86_root, tuning_cache=None)
    m["tuning_cache"] = {**TUNING}
    written = write_manifest(tmp_path / "manifest.json", m)
    assert written["sha256"] != m["sha256"]
    assert load_manifest(tmp_path / "manifest.json")["tuning_cache"]["sha256"] == "b" * 64


def _edit(path: Path, fn: Any) -> None:
    doc = json.loads(path.read_text())
    fn(doc)
    path.write_text(json.dumps(doc))


def test_tampered_pin_is_refused_naming_the_file(
    model: Path, x86_root: Path, tmp_path: Path
) -> None:
    path = tmp_path / "manifest.json"
    write_manifest(path, make(model, x86_root))
    _edit(path, lambda d: d["runtime"].update(version="1.31.1"))
    with pytest.raises(ManifestError) as e:
        load_manifest(path)
    msg = str(e.value)
    assert msg.startswith(f"{path}: sha256: ")
    assert "edited or corrupted" in msg and "rebuild" in msg and "\n" not in msg
    assert e.value.exit_code == 2


def test_edited_observation_is_not_tampering(model: Path, x86_root: Path, tmp_path: Path) -> None:
    path = tmp_path / "manifest.json"
    write_manifest(path, make(model, x86_root))
    _edit(path, lambda d: d["tuning_cache"].update(hits=0))
    assert load_manifest(path)["tuning_cache"]["hits"] == 0


@pytest.mark.parametrize(
    ("edit", "why"),
    [
        (
            lambda d: d.update(schema_version=2),
            r"schema_version: unsupported version 2 \(this guard reads manifest schema_version 1",
        ),
        (lambda d: d.update(schema_version=True), "schema_version: unsupported version True"),
        (lambda d: d.pop("schema_version"), "schema_version: missing"),
        (lambda d: d.pop("host"), "host: missing"),
        (lambda d: d.update(host=[]), "host: missing"),
        (lambda d: d["tuning_cache"].pop("hits"), r"tuning_cache\.hits: missing"),
        (lambda d: d.pop("sha256"), "sha256: missing"),
    ],
)
def test_malformed_manifests_are_refused(
    model: Path, x86_root: Path, tmp_path: Path, edit: Any, why: str
) -> None:
    path = tmp_path / "manifest.json"
    write_manifest(path, make(model, x86_root))
    _edit(path, edit)
    with pytest.raises(ManifestError, match=why):
        load_manifest(path)


def test_unreadable_manifests_are_refused(tmp_path: Path) -> None:
    with pytest.raises(ManifestError, match="missing.json: manifest not found"):
        load_manifest(tmp_path / "missing.json")
    (tmp_path / "bad.json").write_text('{"schema_version": 1,')
    with pytest.raises(ManifestError, match=r"bad.json: not valid JSON \(line 1"):
        load_manifest(tmp_path / "bad.json")
    (tmp_path / "list.json").write_text("[]")
    with pytest.raises(ManifestError, match="not a JSON object"):
        load_manifest(tmp_path / "list.json")


def test_write_refuses_an_incomplete_manifest(tmp_path: Path) -> None:
    with pytest.raises(ManifestError, match=": missing"):
        write_manifest(tmp_path / "manifest.json", {"schema_version": 1})
    assert not (tmp_path / "manifest.json").exists()
