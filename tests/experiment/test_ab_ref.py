"""guard ab --base-ref: two commits of a suite's repository, two workers, one paired verdict."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from guard.cli.main import main
from guard.experiment import ab_ref
from guard.measure.round_runner import measuring_cpus

SUITE = """\
schema_version: 1
suite: refs
defaults:
  backends: [onnxruntime]
  threads: 1
  measure: {warmup_s: 0.0, min_iters: 5, min_time_s: 0.01, max_time_s: 5}
models:
  - name: mm
    source: mm.onnx
    inputs:
      x: {shape: [16, 128], dist: normal, seed: 0}
"""


def matmul_model(path: Path, extra: int) -> None:
    """x @ w; with ``extra`` > 0 also a side branch of that many chained MatMuls (slower,
    the main output unchanged)."""
    rng = np.random.default_rng(0)
    w = numpy_helper.from_array(rng.standard_normal((128, 128)).astype(np.float32) / 12, "w")
    nodes = [helper.make_node("MatMul", ["x", "w"], ["y"])]
    outputs = [helper.make_tensor_value_info("y", TensorProto.FLOAT, [16, 128])]
    prev = "x"
    for i in range(extra):
        nodes += [helper.make_node("MatMul", [prev, "w"], [f"s{i}"])]
        prev = f"s{i}"
    if extra:
        nodes.append(helper.make_node("ReduceSum", [prev], ["z_slow"], keepdims=0))
        outputs.append(helper.make_tensor_value_info("z_slow", TensorProto.FLOAT, []))
    g = helper.make_graph(
        nodes,
        "mm",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [16, 128])],
        outputs,
        [w],
    )
    onnx.save(helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)]), path)


def git(repo: Path, *args: str) -> str:
    return subprocess.run(
        ["git", *args], cwd=repo, check=True, capture_output=True, text=True
    ).stdout.strip()


@pytest.fixture
def repo(tmp_path):
    r = tmp_path / "models"
    r.mkdir()
    git(r, "init", "-q")
    git(r, "config", "user.email", "t@example.com")
    git(r, "config", "user.name", "t")
    (r / "suite.yaml").write_text(SUITE)
    matmul_model(r / "mm.onnx", 0)
    git(r, "add", ".")
    git(r, "commit", "-qm", "base")
    return r


@pytest.mark.slow
def test_head_commit_slower_than_its_base_regresses_aa_passes(repo, tmp_path, monkeypatch):
    monkeypatch.setenv("GUARD_ENV_CACHE", str(tmp_path / "cache" / "envs"))
    base_sha = git(repo, "rev-parse", "HEAD")
    out = tmp_path / "aa.json"
    # A/A: the base commit against the unchanged working tree.
    code = main(
        [
            "ab",
            str(repo / "suite.yaml"),
            "--base-ref",
            "HEAD",
            "--budget-s",
            "3",
            "--json",
            str(out),
            "--quiet",
        ]
    )
    doc = json.loads(out.read_text())
    assert doc["mode"] == "interleaved-ab-refs", doc["rows"]
    assert doc["refs"]["base"]["sha"] == base_sha and doc["refs"]["head"]["sha"] is None
    (row,) = doc["rows"]
    # Whether this A/A pair passes depends on the machine (its false-alarm rate is
    # measured in benchmarks/ab_ref_power.py); what is tested is that it was judged on
    # paired samples and that the exit code follows the verdict.
    assert code == (1 if row["verdict"] == "regressed" else 0), row
    assert row["stats"]["method"] == "wilcoxon-paired" and row["stats"]["n_base"] >= 8
    assert row["numerics"]["output_sha256_changed"] is False

    matmul_model(repo / "mm.onnx", 6)  # head: seven MatMuls where base has one
    git(repo, "commit", "-qam", "slower")
    out = tmp_path / "slow.json"
    code = main(
        [
            "ab",
            str(repo / "suite.yaml"),
            "--base-ref",
            "HEAD~1",
            "--head-ref",
            "HEAD",
            "--budget-s",
            "3",
            "--json",
            str(out),
            "--quiet",
        ]
    )
    doc = json.loads(out.read_text())
    (row,) = doc["rows"]
    assert code == 1 and row["verdict"] == "regressed" and row["ratio"] > 2, row
    assert "model.sha256" in doc["manifest_diff"]
    # Each side was built from its own commit's tree, cached by sha.
    assert (tmp_path / "cache" / "src" / f"src-{base_sha[:16]}" / ".guard-complete").is_file()


def test_bad_refs_and_missing_suites_exit_2(repo, tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("GUARD_ENV_CACHE", str(tmp_path / "cache" / "envs"))
    assert main(["ab", str(repo / "suite.yaml"), "--base-ref", "no-such-ref"]) == 2
    assert "no-such-ref" in capsys.readouterr().err
    (repo / "other.yaml").write_text(SUITE)  # not committed: absent at the base
    assert main(["ab", str(repo / "other.yaml"), "--base-ref", "HEAD"]) == 2
    assert "does not exist at base" in capsys.readouterr().err
    assert main(["ab", str(repo / "suite.yaml"), "--head-ref", "HEAD"]) == 2
    assert (
        main(
            [
                "ab",
                str(repo / "suite.yaml"),
                "--base-ref",
                "HEAD",
                "--base",
                str(repo / "suite.yaml"),
            ]
        )
        == 2
    )


class FakeRunner:
    def __init__(self):
        self.calls = []

    def __call__(self, cmd, **kw):
        self.calls.append(cmd)
        if "venv" in cmd:
            Path(cmd[-1]).mkdir(parents=True, exist_ok=True)
        return subprocess.CompletedProcess(cmd, 0, "", "")


def test_a_side_runs_its_own_guard_and_a_venv_only_when_its_pins_differ(tmp_path):
    """guard's own repository at another commit: that commit's guard; other pins: a venv
    built as guard bump builds them; the same pins: this interpreter."""
    src = tmp_path / "src"
    (src / "guard").mkdir(parents=True)
    (src / "guard" / "__init__.py").write_text("")
    same = ab_ref.pinned_requirements()
    (src / "pyproject.toml").write_text(
        '[project]\nname = "guard"\ndependencies = ' + json.dumps(same) + "\n"
    )
    side = ab_ref.make_side(
        "base",
        src,
        "a" * 40,
        python="/usr/bin/python3",
        env_cache=tmp_path / "envs",
        runner=FakeRunner(),
    )
    assert side.guard_src == src and side.python == "/usr/bin/python3" and side.env is None

    other = [*same[:-1], "numpy==1.0.0"] if same else ["numpy==1.0.0"]
    (src / "pyproject.toml").write_text(
        '[project]\nname = "guard"\ndependencies = ' + json.dumps(other) + "\n"
    )
    runner = FakeRunner()
    side = ab_ref.make_side(
        "base", src, "a" * 40, python="/usr/bin/python3", env_cache=tmp_path / "envs", runner=runner
    )
    assert side.env is not None and side.python == str(Path(side.env) / "bin" / "python")
    assert any("numpy==1.0.0" in c for c in runner.calls[-1])

    user_repo = tmp_path / "user"
    user_repo.mkdir()
    side = ab_ref.make_side(
        "head",
        user_repo,
        None,
        python="/usr/bin/python3",
        env_cache=tmp_path / "envs",
        runner=FakeRunner(),
    )
    assert side.guard_src == ab_ref.REPO_ROOT  # not a guard tree: this guard on both sides


def test_both_workers_measure_on_the_same_cores():
    cpus = measuring_cpus(1)
    assert cpus is not None and len(cpus) == 1 and cpus <= os.sched_getaffinity(0)
    assert measuring_cpus(64) == os.sched_getaffinity(0)  # never more than allowed


@pytest.mark.slow
@pytest.mark.skipif(
    any(shutil.which(t) is None for t in ("qemu-x86_64", "cc")),
    reason="counting needs qemu-user and gcc (apt-get install -y qemu-user gcc)",
)
def test_base_ref_counted_counts_each_commits_artefact(repo, tmp_path, monkeypatch):
    """--base-ref --counted: each commit's artefact counted by its own worker, as guard run
    --counted counts it (bundled: its x86-64-v3 sibling in the static runner)."""
    monkeypatch.setenv("GUARD_ENV_CACHE", str(tmp_path / "cache" / "envs"))
    (repo / "suite.yaml").write_text(SUITE.replace("[onnxruntime]", "[bundled]"))
    git(repo, "commit", "-qam", "bundled")
    matmul_model(repo / "mm.onnx", 3)  # head: four MatMuls where base has one
    git(repo, "commit", "-qam", "heavier")
    out = tmp_path / "counted.json"
    argv = ["ab", str(repo / "suite.yaml"), "--base-ref", "HEAD~1", "--head-ref", "HEAD",
            "--counted", "--budget-s", "1", "--json", str(out), "--quiet"]  # fmt: skip
    assert main(argv) == 1
    doc = json.loads(out.read_text())
    (row,) = doc["counted"]
    assert row["verdict"] == "regressed" and row["model"] == "mm", row
    assert row["counted_target"] == "llvm -mcpu=x86-64-v3 -mtriple=x86_64-linux-gnu"
    assert row["instructions"][1] > 2 * row["instructions"][0], row
    assert doc["summary"]["counted"]
