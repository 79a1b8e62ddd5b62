"""guard bisect: the first regressed commit in 1 + ceil(log2 n) paired A/B steps."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest
from test_ab_ref import SUITE, matmul_model

from guard.cli.main import main
from guard.core.errors import UsageError
from guard.experiment.bisect import bisect, commits_between, max_steps
from guard.results.documents import ComparisonDocument


def git(repo: Path, *args: str) -> str:
    return subprocess.run(
        ["git", "-c", "user.email=t@e", "-c", "user.name=t", *args],
        cwd=repo, check=True, capture_output=True, text=True,
    ).stdout.strip()  # fmt: skip


def linear_repo(path: Path, n: int) -> tuple[str, list[str]]:
    """A repository of GOOD and ``n`` commits after it, built by code."""
    path.mkdir()
    git(path, "init", "-q")
    for i in range(n + 1):
        (path / "version.txt").write_text(f"{i}\n")
        git(path, "add", ".")
        git(path, "commit", "-qm", f"commit {i}")
    shas = git(path, "rev-list", "--reverse", "HEAD").split()
    return shas[0], shas[1:]


def fake_ab(commits: list[str], slow: int | None, calls: list[str], broken=()):
    """An injected guard ab step: every commit from index ``slow`` on is 20% slower."""

    def step(good: str, sha: str) -> ComparisonDocument:
        calls.append(sha)
        if sha in broken:
            raise UsageError("head side: the model does not build", where=sha)
        bad = slow is not None and commits.index(sha) >= slow
        ratio, ci = (1.2, [1.17, 1.23]) if bad else (1.0, [0.98, 1.02])
        row = {"model": "mm", "backend": "onnxruntime", "target": "host", "ratio": ratio, "ci": ci}
        return ComparisonDocument.from_json(
            {"rows": [{**row, "verdict": "regressed" if bad else "pass"}]}
        )

    return step


def test_a_16_commit_range_with_one_slow_commit_is_named_in_at_most_5_steps(tmp_path):
    good, commits = linear_repo(tmp_path / "r", 16)
    assert commits_between(tmp_path / "r", good, "HEAD") == (good, commits[-1], commits)
    assert max_steps(16) == 5
    for slow in range(16):  # the slow commit anywhere in the range, BAD included
        calls: list[str] = []
        lines: list[str] = []
        res = bisect(good, commits[-1], commits, fake_ab(commits, slow, calls), lines.append)
        assert res.first_regressed == commits[slow], slow
        assert len(res.steps) == len(calls) <= 5, (slow, len(calls))
        assert calls[0] == commits[-1]  # BAD against GOOD first
        assert all("interval" in line for line in lines), lines
    assert "regressed x1.200 (interval 1.170-1.230)" in lines[0]


def test_a_range_without_a_regression_says_so_after_one_step(tmp_path):
    good, commits = linear_repo(tmp_path / "r", 5)
    calls: list[str] = []
    lines: list[str] = []
    res = bisect(good, commits[-1], commits, fake_ab(commits, None, calls), lines.append)
    assert res.first_regressed is None and calls == [commits[-1]]
    assert lines[-1].startswith(f"no regression between {good[:12]}")


def test_an_inconclusive_step_counts_as_not_regressed_and_says_so(tmp_path):
    good, commits = linear_repo(tmp_path / "r", 4)
    calls: list[str] = []
    inner = fake_ab(commits, 2, calls)

    def step(g: str, sha: str) -> ComparisonDocument:
        doc = inner(g, sha).to_json()
        if sha == commits[1]:
            doc["rows"][0].update(verdict="inconclusive", ratio=1.04, ci=[0.99, 1.09])
        return ComparisonDocument.from_json(doc)

    lines: list[str] = []
    res = bisect(good, commits[-1], commits, step, lines.append)
    assert res.first_regressed == commits[2]
    assert "inconclusive (counted as not regressed)" in lines[1], lines
    assert "interval 0.990-1.090" in lines[1]


def test_a_middle_commit_that_does_not_build_is_skipped(tmp_path):
    good, commits = linear_repo(tmp_path / "r", 8)
    calls: list[str] = []
    step = fake_ab(commits, 5, calls, broken={commits[3]})
    res = bisect(good, commits[-1], commits, step, lambda _: None)
    assert res.first_regressed == commits[5]
    assert [s.verdict for s in res.steps].count("skipped") == 1


def test_ends_that_do_not_build_and_bad_ranges_exit_2_naming_the_commit(tmp_path, capsys):
    good, commits = linear_repo(tmp_path / "r", 4)
    step = fake_ab(commits, 2, [], broken={commits[-1]})
    with pytest.raises(UsageError) as err:
        bisect(good, commits[-1], commits, step, lambda _: None)
    assert f"--bad {commits[-1][:12]} does not build or run" in str(err.value)
    with pytest.raises(UsageError, match="not an ancestor"):
        commits_between(tmp_path / "r", commits[-1], good)
    with pytest.raises(UsageError, match="same commit"):
        commits_between(tmp_path / "r", "HEAD", commits[-1])
    (tmp_path / "r" / "s.yaml").write_text(SUITE)
    assert main(["bisect", str(tmp_path / "r" / "s.yaml"), "--good", "nope", "--bad", "HEAD"]) == 2
    assert "--good nope: no such commit" in capsys.readouterr().err


@pytest.mark.slow
def test_a_real_bisection_names_the_commit_that_made_the_model_slower(tmp_path, monkeypatch):
    monkeypatch.setenv("GUARD_ENV_CACHE", str(tmp_path / "cache" / "envs"))
    repo = tmp_path / "models"
    repo.mkdir()
    git(repo, "init", "-q")
    (repo / "suite.yaml").write_text(SUITE)
    shas = []
    for i in range(17):  # GOOD, then 16 commits; the 11th adds six chained MatMuls
        matmul_model(repo / "mm.onnx", 6 if i >= 11 else 0)
        (repo / "version.txt").write_text(f"{i}\n")
        git(repo, "add", ".")
        git(repo, "commit", "-qm", f"commit {i}")
        shas.append(git(repo, "rev-parse", "HEAD"))
    out = tmp_path / "b.json"
    code = main(
        ["bisect", str(repo / "suite.yaml"), "--good", shas[0], "--bad", "HEAD",
         "--budget-s", "3", "--json", str(out)]
    )  # fmt: skip
    doc = json.loads(out.read_text())
    assert code == 1 and doc["first_regressed"] == shas[11], doc
    assert len(doc["steps"]) <= max_steps(16) == 5
    assert doc["steps"][0]["verdict"] == "regressed"
