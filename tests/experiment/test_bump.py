"""guard bump with a fake subprocess runner: env cache, pin handling, report order, exits."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "compare"))
from compare_fixtures import doc, lat, manifest, result  # noqa: E402

from guard.core.errors import UsageError  # noqa: E402
from guard.experiment import bump  # noqa: E402

REQS = ["numpy==2.4.6", "onnxruntime==1.32.0", "scipy==1.17.1"]


class FakeRunner:
    """Plays venv, pip and `guard run`; the suite run writes a synthetic results file."""

    def __init__(self, slow_version=None, fail_pip=False):
        self.calls = []
        self.slow_version = slow_version
        self.fail_pip = fail_pip
        self.rng = np.random.default_rng(0)

    def __call__(self, cmd, **kw):
        self.calls.append(cmd)
        if cmd[1:3] == ["-m", "venv"]:
            env = cmd[-1]
            import pathlib

            (pathlib.Path(env) / "bin").mkdir(parents=True, exist_ok=True)
            return subprocess.CompletedProcess(cmd, 0, "", "")
        if "pip" in cmd:
            if self.fail_pip:
                return subprocess.CompletedProcess(
                    cmd, 1, "", "ERROR: No matching distribution found for onnxruntime==0.0.1"
                )
            return subprocess.CompletedProcess(cmd, 0, "", "")
        assert cmd[1:4] == ["-m", "guard.cli.main", "run"] and "--no-track" in cmd
        assert kw["env"]["PYTHONPATH"].split(":")[0] == str(bump.REPO_ROOT)
        env_name = cmd[0].split("/")[-3]
        version = env_name.split("-")[1]
        factor = 1.2 if version == self.slow_version else 1.0
        m = manifest(runtime__version=version, compiler__version=version)
        out = doc(result("mlp", lat(self.rng, factor=factor), manifest=m))
        if "--counted" in cmd:  # a counted run: 1 M instructions, 1% more on the slow side
            fp = {
                "engine": "qemu-tcg-plugin",
                "emulator": "qemu-x86_64 7.2.22",
                "plugin_sha256": "p",
                "target": "qemu -cpu max",
                "input_sha256": "i",
            }
            out["results"][0]["counted"] = {
                "instructions": 1e6 * (1.01 if version == self.slow_version else 1.0),
                "bytes_loaded": 1e5, "bytes_stored": 1e4, "fingerprint": fp,
            }  # fmt: skip
        path = cmd[cmd.index("--json") + 1]
        with open(path, "w") as f:
            json.dump(out, f)
        return subprocess.CompletedProcess(cmd, 0, "", "")


@pytest.fixture
def suite(tmp_path):
    p = tmp_path / "smoke.yaml"
    p.write_text("schema_version: 1\n")
    return p


def test_requirements_replace_the_pin_or_add_it():
    assert bump.requirements_with("onnxruntime==1.31.1", REQS) == [
        "numpy==2.4.6",
        "onnxruntime==1.31.1",
        "scipy==1.17.1",
    ]
    assert bump.requirements_with("apache_tvm==0.26.0", ["apache-tvm==0.27.0.post1"]) == [
        "apache_tvm==0.26.0"
    ]
    assert bump.requirements_with("onnx==1.22.0", REQS)[0] == "numpy==2.4.6"
    assert "onnx==1.22.0" in bump.requirements_with("onnx==1.22.0", REQS)


@pytest.mark.parametrize("bad", ["onnxruntime", "onnxruntime>=1.0", "==1.0", "a b==1"])
def test_bad_pins_are_usage_errors(bad):
    with pytest.raises(UsageError, match="PKG==VERSION"):
        bump.parse_pin(bad)


def test_pinned_requirements_come_from_pyproject():
    reqs = bump.pinned_requirements()
    assert any(r.startswith("onnxruntime==") for r in reqs)


def test_pyproject_ranges_are_pinned_by_the_lock_beside_it(tmp_path):
    """pyproject declares ranges; a bump environment gets the lock's exact versions (and
    the tvm/openvino extras), a range stays a range where the lock has no pin."""
    (tmp_path / "constraints").mkdir()
    (tmp_path / "pyproject.toml").write_text(
        '[project]\nname = "guard"\ndependencies = ["onnxruntime>=1.19.2,<2", '
        '"psycopg[binary]>=3.3.9,<4", "rich>=15"]\n'
        '[project.optional-dependencies]\nopenvino = ["openvino>=2026.3.0,<2027"]\n'
        'test = ["pytest==9.0.3"]\n'
    )
    (tmp_path / "constraints" / "ci.txt").write_text(
        "# a lock\nonnxruntime==1.32.0\npsycopg==3.3.9\nopenvino==2026.4.1\npytest==9.0.3\n"
    )
    assert bump.pinned_requirements(tmp_path / "pyproject.toml") == [
        "onnxruntime==1.32.0",
        "psycopg[binary]==3.3.9",
        "rich>=15",
        "openvino==2026.4.1",
    ]
    # A constraints file alone pins guard's own dependencies (the CI bump job's base).
    reqs = bump.read_requirements(tmp_path / "constraints" / "ci.txt")
    assert "onnxruntime==1.32.0" in reqs and "openvino==2026.4.1" in reqs


def test_bump_report_leads_with_manifest_diff_and_exits_1_on_regression(tmp_path, suite):
    runner = FakeRunner(slow_version="1.32.0")
    cmp, code = bump.run_bump(
        "onnxruntime==1.31.1",
        "onnxruntime==1.32.0",
        suite,
        env_cache=tmp_path / "envs",
        out_dir=tmp_path / "out",
        runner=runner,
        base_requirements=REQS,
    )
    assert code == 1 and cmp["rows"][0]["verdict"] == "regressed"
    assert list(cmp["manifest_diff"])[0] == "package.onnxruntime"
    assert cmp["manifest_diff"]["runtime.version"] == ["1.31.1", "1.32.0"]
    md = (tmp_path / "out" / "onnxruntime-1.31.1-1.32.0" / "bump.md").read_text().splitlines()
    assert md[0] == "## Manifest diff" and md[2] == "- `package.onnxruntime`: 1.31.1 → 1.32.0"
    assert md[3] == "- `compiler.version`: 1.31.1 → 1.32.0"
    assert (
        json.loads((tmp_path / "out" / "onnxruntime-1.31.1-1.32.0" / "bump.json").read_text())[
            "bump"
        ]["changes"][0]["new"]
        == "1.32.0"
    )


def test_envs_are_cached_between_runs(tmp_path, suite):
    runner = FakeRunner()
    kw = dict(
        env_cache=tmp_path / "envs", out_dir=tmp_path / "out", runner=runner,
        base_requirements=REQS, keep_envs=True,
    )  # fmt: skip
    _, code = bump.run_bump("onnxruntime==1.31.1", "onnxruntime==1.32.0", suite, **kw)
    assert code == 0
    pip_calls = sum("pip" in c for c in runner.calls)
    assert pip_calls == 2
    bump.run_bump("onnxruntime==1.31.1", "onnxruntime==1.32.0", suite, **kw)
    assert sum("pip" in c for c in runner.calls) == 2  # nothing reinstalled
    installed = [c for c in runner.calls if "pip" in c][0]
    assert "onnxruntime==1.31.1" in installed and "onnxruntime==1.32.0" not in installed


def test_failed_install_names_the_pin_and_is_not_cached(tmp_path, suite):
    runner = FakeRunner(fail_pip=True)
    with pytest.raises(
        UsageError, match="environment for onnxruntime==0.0.1.*No matching distribution"
    ):
        bump.run_bump(
            "onnxruntime==0.0.1",
            "onnxruntime==1.32.0",
            suite,
            env_cache=tmp_path / "e",
            out_dir=tmp_path / "o",
            runner=runner,
            base_requirements=REQS,
        )
    assert not list((tmp_path / "e").glob("*/.guard-complete"))


def test_argument_errors(tmp_path, suite):
    with pytest.raises(UsageError, match="one package"):
        bump.run_bump("onnx==1.0", "numpy==2.0", suite)
    with pytest.raises(UsageError, match="same version"):
        bump.run_bump("onnx==1.0", "onnx==1.0", suite)
    with pytest.raises(UsageError, match="no such suite"):
        bump.run_bump("onnx==1.0", "onnx==1.1", tmp_path / "nope.yaml")


def test_failed_suite_run_is_reported(tmp_path, suite):
    def runner(cmd, **kw):
        if "guard.cli.main" in cmd:
            return subprocess.CompletedProcess(cmd, 2, "", "guard: error: smoke.yaml: models: bad")
        return FakeRunner()(cmd, **kw)

    with pytest.raises(UsageError, match="exited 2: guard: error: smoke.yaml"):
        bump.run_bump(
            "onnx==1.0",
            "onnx==1.1",
            suite,
            env_cache=tmp_path / "e",
            out_dir=tmp_path / "o",
            runner=runner,
            base_requirements=REQS,
        )


def test_changed_pins_between_requirement_sets():
    base = ["numpy==2.4.6", "onnx==1.23.2", "onnxruntime==1.31.1", "old==1.0"]
    head = ["numpy==2.4.6", "onnx==1.23.2", "onnxruntime==1.32.0", "new==2.0"]
    assert bump.changed_pins(base, head) == [
        ("new", None, "2.0"),
        ("old", "1.0", None),
        ("onnxruntime", "1.31.1", "1.32.0"),
    ]


def test_cli_bump_from_two_pyprojects(tmp_path, suite, monkeypatch, capsys):
    from guard.cli.main import main

    base = tmp_path / "base.toml"
    head = tmp_path / "head.toml"
    base.write_text('[project]\ndependencies = ["numpy==2.4.6", "onnxruntime==1.31.1"]\n')
    head.write_text('[project]\ndependencies = ["numpy==2.4.6", "onnxruntime==1.32.0"]\n')
    runner = FakeRunner(slow_version="1.32.0")
    monkeypatch.setattr(bump.subprocess, "run", runner)
    code = main(
        [
            "bump",
            str(suite),
            "--base-pyproject",
            str(base),
            "--head-pyproject",
            str(head),
            "--env-cache",
            str(tmp_path / "envs"),
            "--out-dir",
            str(tmp_path / "out"),
        ]
    )
    out = capsys.readouterr().out.splitlines()
    assert code == 1
    assert out[2] == "- `package.onnxruntime`: 1.31.1 → 1.32.0"
    assert main(["bump", "onnx==1.0", str(suite), "--env-cache", str(tmp_path / "e")]) == 2
    assert main(["bump", "a.yaml", "b.yaml"]) == 2


def test_rounds_run_abba_and_pool_samples(tmp_path, suite):
    runner = FakeRunner()
    cmp, _ = bump.run_bump("onnxruntime==1.31.1", "onnxruntime==1.32.0", suite, rounds=3,
                           env_cache=tmp_path / "envs", out_dir=tmp_path / "out", runner=runner,
                           base_requirements=REQS)  # fmt: skip
    order = [c[0].split("/")[-3].split("-")[1] for c in runner.calls if "guard.cli.main" in c]
    assert order == ["1.31.1", "1.32.0", "1.32.0", "1.31.1", "1.31.1", "1.32.0"]
    # Three runs of five rounds per side: the rounds of every process are the units.
    assert cmp["rows"][0]["stats"]["n_base"] == cmp["rows"][0]["stats"]["n_head"] == 15
    assert cmp["bump"]["rounds"] == 3


def test_bump_says_what_it_is_building_and_removes_its_envs(tmp_path, suite):
    """Issue 28 item 8: guard bump was silent for 7.6 minutes while it built two venvs, and
    left them behind. Each long step says what it does and, while it lasts, that it is
    still working; the envs are removed at the end unless --keep-envs."""
    import time as _time

    fake = FakeRunner()

    def slow(cmd, **kw):  # pip takes a while, as it does
        if "pip" in cmd:
            _time.sleep(0.5)
        return fake(cmd, **kw)

    said: list[str] = []
    envs = tmp_path / "envs"
    _, code = bump.run_bump("onnxruntime==1.31.1", "onnxruntime==1.32.0", suite,
                            env_cache=envs, out_dir=tmp_path / "out", runner=slow,
                            base_requirements=REQS, say=said.append, every_s=0.1)  # fmt: skip
    assert code == 0
    assert any(s.startswith("guard bump: installing 3 packages") for s in said)
    assert any("still working" in s for s in said)
    assert any(s.startswith("guard bump: run 1 of 2: the suite on base") for s in said)
    assert said[-1].startswith("guard bump: removed 2 environment(s)")
    assert list(envs.iterdir()) == []
    # --keep-envs keeps them for the next bump
    bump.run_bump("onnxruntime==1.31.1", "onnxruntime==1.32.0", suite, env_cache=envs,
                  out_dir=tmp_path / "out", runner=slow, base_requirements=REQS,
                  say=said.append, every_s=0.1, keep_envs=True)  # fmt: skip
    assert len(list(envs.iterdir())) == 2


def test_a_failed_bump_removes_the_env_it_built(tmp_path, suite):
    said: list[str] = []

    def runner(cmd, **kw):
        if "guard.cli.main" in cmd:
            return subprocess.CompletedProcess(cmd, 3, "", "boom")
        return FakeRunner()(cmd, **kw)

    with pytest.raises(UsageError):
        bump.run_bump("onnxruntime==1.31.1", "onnxruntime==1.32.0", suite,
                      env_cache=tmp_path / "envs", out_dir=tmp_path / "out", runner=runner,
                      base_requirements=REQS, say=said.append)  # fmt: skip
    assert list((tmp_path / "envs").iterdir()) == [] and "removed 2" in said[-1]


def test_counted_bump_counts_once_per_side_and_adds_a_counted_row(tmp_path, suite):
    runner = FakeRunner(slow_version="1.32.0")
    cmp, code = bump.run_bump("onnxruntime==1.31.1", "onnxruntime==1.32.0", suite, rounds=2,
                              env_cache=tmp_path / "envs", out_dir=tmp_path / "out",
                              runner=runner, base_requirements=REQS, counted=True)  # fmt: skip
    runs = [c for c in runner.calls if "guard.cli.main" in c]
    assert [("--counted" in c) for c in runs] == [True, True, False, False]
    (row,) = cmp["counted"]
    assert row["verdict"] == "regressed" and abs(row["instructions_pct"] - 1.0) < 1e-9
    assert code == 1
