"""guard run with a host and an AArch64 target, then guard compare of the run: done-when.

On this x86_64 machine the AArch64 artefact runs under qemu-aarch64-static: its result
checks numerics, partitions and arena and reports latency as not measured; guard compare
of the run with itself shows the cross-architecture rows.
"""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import pytest
from emulate_fakes import tools_mark

from guard.cli.main import main
from guard.emulate import host_arch
from guard.emulate.tools import TOOLCHAINS

OTHER = "x86_64" if host_arch() == "aarch64" else "aarch64"
FOREIGN = {
    "aarch64": "llvm -mtriple=aarch64-linux-gnu -mattr=+neon",
    "x86_64": "llvm -mtriple=x86_64-linux-gnu -mcpu=x86-64-v2",
}[OTHER]
TC = TOOLCHAINS[OTHER]
needs_tools = tools_mark(TC)
SUITE = f"""schema_version: 1
suite: xarch
defaults:
  backends: [bundled]
  targets: [host, "{FOREIGN}"]
  measure: {{warmup_s: 0.01, min_iters: 5, min_time_s: 0.02, max_time_s: 1, rounds: 2}}
  checks:
    tolerance: {{rtol: 1.0e-4, atol: 1.0e-5}}
    partitions: {{max: 1}}
    arena: {{max_bytes: 1000000}}
    latency: {{p50_ms: {{x86_64: 50, aarch64: 50}}, regress_pct: 10}}
models:
  - name: mlp
    source: zoo:mlp
    inputs:
      x: {{shape: [1, 256], dist: normal, seed: 0}}
"""


@pytest.fixture
def suite(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    work = tmp_path / "work"
    work.mkdir()
    monkeypatch.chdir(work)
    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)
    path = tmp_path / "xarch.yaml"
    path.write_text(SUITE)
    return path


def _run(suite: Path, out: Path) -> tuple[int, dict]:
    code = main(["run", str(suite), "--no-track", "--json", str(out)])
    return code, json.loads(out.read_text())


@needs_tools
@pytest.mark.slow
def test_host_and_emulated_results_then_cross_architecture_rows(
    suite: Path, tmp_path: Path
) -> None:
    code, doc = _run(suite, tmp_path / "r.json")
    assert code == 0, [r["checks"] for r in doc["results"]]
    host, foreign = doc["results"]
    assert (host["target"], foreign["target"]) == ("host", FOREIGN)
    # the host result is measured
    assert host["latency_status"] == "measured" and host["latency_ms"]["p50"] > 0
    assert {c["name"]: c["status"] for c in host["checks"]}["latency.p50"] == "pass"
    # the foreign one: numerics, partitions, arena checked; latency not measured
    assert foreign["latency_status"] == "emulated" and foreign["latency_ms"] is None
    status = {c["name"]: c for c in foreign["checks"]}
    assert status["tolerance"]["status"] in ("pass", "created")
    assert status["partitions"]["status"] == "pass" and status["arena"]["status"] == "pass"
    for name in ("latency.p50", "latency.regress"):
        assert status[name]["status"] == "skip"
        assert status[name]["message"].startswith(f"skipped: emulated ({TC.emulator})")
    assert foreign["manifest"]["target"]["canonical"].endswith(f"-mtriple={OTHER}-linux-gnu")
    assert foreign["arena_bytes"] == host["arena_bytes"] or foreign["arena_bytes"] > 0

    # a second run compares both with the golden
    code, doc = _run(suite, tmp_path / "r2.json")
    assert code == 0
    assert all(r["numerics"]["golden_status"] == "compared" for r in doc["results"])

    rc = main(["compare", str(tmp_path / "r2.json"), str(tmp_path / "r2.json"), "--quiet",
               "--json", str(tmp_path / "c.json"), "--markdown", str(tmp_path / "c.md")])  # fmt: skip
    assert rc == 0
    cmp = json.loads((tmp_path / "c.json").read_text())
    (row,) = cmp["cross_arch"]
    assert row["model"] == "mlp" and row["arches"] == [host_arch(), OTHER]
    assert row["verdict"] == "consistent"
    assert row["outputs"]["allclose"] is True and row["outputs"]["max_abs"] < 1e-4
    assert row["outputs"]["top1_agreement"] is None or row["outputs"]["top1_agreement"] == 1.0
    assert row["partitions_equal"] and row["latency"] == "not compared across architectures"
    assert "## Cross-architecture consistency" in (tmp_path / "c.md").read_text()


@pytest.mark.slow
def test_missing_emulator_is_an_error_result_naming_the_package(
    suite: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # PATH without the emulator: the host result still completes
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    for tool in ("git",):
        found = shutil.which(tool)
        if found:
            os.symlink(found, bin_dir / tool)
    monkeypatch.setenv("PATH", str(bin_dir))
    code, doc = _run(suite, tmp_path / "r.json")
    host, foreign = doc["results"]
    assert host["verdict"] == "pass"
    assert foreign["verdict"] == "error"
    assert foreign["error"].startswith(f"{TC.emulator} is not installed: install the Debian "
                                       f"package {TC.emulator_package}")  # fmt: skip
    assert "\n" not in foreign["error"] and "Traceback" not in foreign["error"]
    assert code == 2
