"""Supported ranges: pyproject.toml and guard.core.supported say the same; an installed
version outside its range is one warning line and a mark in the results, not a refusal."""

from __future__ import annotations

import json
import tomllib
from pathlib import Path

import pytest

from guard.core import supported
from guard.core.supported import outside_range, warning_line

ROOT = Path(__file__).resolve().parents[1]


def _pyproject() -> dict:
    return tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]


def test_pyproject_declares_the_ranges_supported_py_checks():
    project = _pyproject()
    assert tuple(project["dependencies"]) == supported.SUPPORTED
    extras = project["optional-dependencies"]
    for name, reqs in supported.EXTRAS.items():
        assert tuple(extras[name]) == reqs
    # The test extra pulls both backends' extras in, so the README's pytest runs their tests.
    assert "guard[tvm,openvino]" in extras["test"]


def test_every_runtime_dependency_is_a_range_not_a_pin():
    for req in supported.requirements():
        assert "==" not in str(req.specifier) and req.specifier, req
        assert any(s.operator == ">=" for s in req.specifier), req


def test_ci_lock_pins_every_supported_package_inside_its_range():
    lock = {}
    for line in (ROOT / "constraints" / "ci.txt").read_text().splitlines():
        if line and not line.startswith("#"):
            name, _, version = line.partition("==")
            lock[name.lower()] = version
    assert "guard" not in lock  # the lock is of the dependencies, not of guard
    for req in supported.requirements():
        assert req.name in lock, f"constraints/ci.txt does not pin {req.name}"
    assert outside_range(lock) == []


def test_outside_range_names_the_package_the_version_and_the_range():
    out = outside_range({"onnxruntime": "1.18.1", "numpy": "2.4.6", "mlflow": "4.0.0"})
    assert [(o["package"], o["version"]) for o in out] == [
        ("onnxruntime", "1.18.1"),
        ("mlflow", "4.0.0"),
    ]
    line = warning_line(out)
    assert "\n" not in line
    assert "onnxruntime 1.18.1 (supported: <2,>=1.19.2)" in line
    assert "mlflow 4.0.0" in line and "results are written and marked" in line
    assert outside_range({"onnxruntime": "not-a-version"})[0]["package"] == "onnxruntime"


@pytest.mark.slow
def test_a_run_outside_the_range_warns_once_and_marks_the_results(tmp_path, monkeypatch):
    from guard.run import runner

    fake = [{"package": "onnxruntime", "version": "1.18.1", "supported": "<2,>=1.19.2"}]
    monkeypatch.setattr(runner, "outside_range", lambda: fake)
    lines: list[str] = []
    monkeypatch.setattr(runner, "say", lambda msg, console=None: lines.append(msg))
    monkeypatch.chdir(tmp_path)
    doc, code = runner.run_suite(
        ROOT / "suites" / "smoke.yaml",
        runner.RunOptions(models=("digits",), backends=("onnxruntime",), track=False,
                          json_path=tmp_path / "r.json", workdir=tmp_path),
    )  # fmt: skip
    assert code == 0
    assert sum("outside guard's supported versions" in m for m in lines) == 1
    written = json.loads((tmp_path / "r.json").read_text())
    assert written["unsupported_versions"] == fake and written["results"]


@pytest.mark.parametrize("backend, module", [("tvm", "tvm"), ("openvino", "openvino")])
def test_a_backend_whose_extra_is_missing_names_its_install_command(backend, module, monkeypatch):
    import importlib.util

    from guard.backends import get_backend
    from guard.core.errors import UsageError

    real = importlib.util.find_spec
    monkeypatch.setattr(
        importlib.util, "find_spec", lambda n, *a: None if n == module else real(n, *a)
    )
    with pytest.raises(UsageError, match=rf"pip install 'guard\[{backend}\]'") as e:
        get_backend(backend)
    assert e.value.exit_code == 2 and "\n" not in str(e.value)
