"""guard run compares itself with the base branch's last finished invocation by default."""

from __future__ import annotations

import io
import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from compare_fixtures import doc, lat, result

from guard.core.errors import UsageError
from guard.results.documents import ResultsDocument
from guard.run.base_compare import base_branch, compare_with_base

sys.path.insert(0, str(Path(__file__).parents[1] / "run"))
from run_helpers import FAST_MEASURE, small_convnet, write_suite  # noqa: E402

from guard.cli.main import main  # noqa: E402


def frame(*rows: tuple[str, str]) -> pd.DataFrame:
    return pd.DataFrame(
        [{"run_id": rid, "tags.guard.git.commit": c, "artifact_uri": ""} for rid, c in rows]
    )


def tracked(d: dict, uri: str = "sqlite:///x.db", commit: str = "head") -> dict:
    return {**d, "tracking": {"uri": uri}, "git": {"commit": commit, "branch": "feature"}}


def test_base_branch_comes_from_the_flag_else_github_base_ref(monkeypatch):
    monkeypatch.delenv("GITHUB_BASE_REF", raising=False)
    assert base_branch(None) is None
    monkeypatch.setenv("GITHUB_BASE_REF", "")
    assert base_branch(None) is None  # empty outside pull requests
    monkeypatch.setenv("GITHUB_BASE_REF", "main")
    assert base_branch(None) == "main" and base_branch("release") == "release"


def test_the_newest_readable_invocation_other_than_head_is_the_base(tmp_path):
    rng = np.random.default_rng(0)
    base_doc = doc(result("mlp", lat(rng)))
    head_doc = tracked(doc(result("mlp", lat(rng, factor=1.3))))
    asked = {}

    def finder(uri, suite, **kw):
        asked.update(kw, suite=suite)
        # newest first: the head's own commit, a sharded run never merged, then the base
        return frame(("r-head", "head"), ("r-shard", "c2"), ("r-base", "c1"))

    def loader(uri, run_id):
        if run_id == "r-shard":
            raise UsageError("has no results.json", where=f"run:{run_id}")
        assert run_id == "r-base", run_id
        return base_doc

    out = io.StringIO()
    cmp = compare_with_base(
        ResultsDocument.from_json(head_doc),
        "main",
        workdir=tmp_path,
        out=out,
        finder=finder,
        loader=loader,
    )
    assert asked == {"suite": "smoke", "level": "invocation", "branch": "main", "max_results": 20}
    text = out.getvalue()
    assert "skipped run:r-shard" in text
    assert "vs base branch main@c1 (run:r-base)" in text
    assert cmp is not None and cmp["rows"][0]["verdict"] == "regressed"


def test_no_base_run_and_an_untracked_run_say_so_in_one_line(tmp_path):
    out = io.StringIO()
    d = tracked(doc(result("mlp", lat(np.random.default_rng(1)))))
    typed = ResultsDocument.from_json(d)
    no_base = compare_with_base(
        typed, "main", workdir=tmp_path, out=out, finder=lambda *a, **k: frame()
    )
    assert no_base is None
    assert "no finished run of suite 'smoke' to compare with" in out.getvalue()
    out = io.StringIO()
    untracked = {**d, "tracking": {"uri": "http://x", "error": "refused"}}
    typed = ResultsDocument.from_json(untracked)
    assert compare_with_base(typed, "main", workdir=tmp_path, out=out) is None
    assert "not compared (tracking did not log this run)" in out.getvalue()


def git(repo: Path, *args: str) -> str:
    return subprocess.run(
        ["git", *args], cwd=repo, check=True, capture_output=True, text=True
    ).stdout.strip()


@pytest.mark.slow
def test_a_pull_request_run_prints_the_comparison_with_the_last_finished_base_run(
    tmp_path, monkeypatch, capsys
):
    import mlflow
    from mlflow import MlflowClient

    repo = tmp_path / "repo"
    repo.mkdir()
    small_convnet(repo / "net.onnx")
    suite = write_suite(
        repo,
        f"""
        schema_version: 1
        suite: prs
        defaults: {{backends: [onnxruntime], measure: {FAST_MEASURE}}}
        models: [{{name: net, source: net.onnx}}]
        """,
    )
    git(repo, "init", "-q")
    git(repo, "-c", "user.email=t@e", "-c", "user.name=t", "add", ".")
    git(repo, "-c", "user.email=t@e", "-c", "user.name=t", "commit", "-qm", "base")
    monkeypatch.chdir(repo)
    for var in ("MLFLOW_TRACKING_URI", "GITHUB_HEAD_REF", "GITHUB_BASE_REF"):
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setenv("GITHUB_REF_NAME", "main")
    assert main(["run", str(suite), "--json", "base.json"]) == 0
    base = json.loads(Path("base.json").read_text())
    uri = base["tracking"]["uri"]
    base_id = base["tracking"]["parent_run_id"]
    capsys.readouterr()

    # A newer invocation on main that was cut short: never the base.
    client = MlflowClient(uri)
    mlflow.set_tracking_uri(uri)
    # The onnxruntime result's run carries its per-node profile as a bar chart.
    (child,) = base["tracking"]["child_run_ids"]
    assert [f.path for f in client.list_artifacts(child, "profile")] == ["profile/top_nodes.svg"]
    eid = client.get_experiment_by_name("guard/prs").experiment_id
    killed = client.create_run(
        eid,
        tags={"guard.level": "invocation", "guard.git.branch": "main", "guard.git.commit": "f00"},
    )
    client.set_terminated(killed.info.run_id, status="KILLED")

    (repo / "note.txt").write_text("a change\n")
    git(repo, "add", ".")
    git(repo, "-c", "user.email=t@e", "-c", "user.name=t", "commit", "-qm", "head")
    monkeypatch.setenv("GITHUB_HEAD_REF", "feature")
    monkeypatch.setenv("GITHUB_BASE_REF", "main")
    assert main(["run", str(suite), "--json", "head.json"]) == 0
    out = capsys.readouterr().out
    assert f"guard run vs base branch main@{base['git']['commit'][:10]} (run:{base_id})" in out
    assert "| net |" in out or "net" in out.split("vs base branch", 1)[1]
    assert main(["run", str(suite), "--no-base-compare"]) == 0
    assert "vs base branch" not in capsys.readouterr().out
