"""guard.zoo.wheels: a model inside an installed wheel, or why it is missing with the
command that installs it (the test extra's, or the pinned benchmark wheels' one line)."""

from __future__ import annotations

import sys
from pathlib import Path

from guard.zoo import wheels


def test_a_missing_wheel_names_the_command_that_installs_it(monkeypatch) -> None:
    monkeypatch.setattr(wheels.importlib.util, "find_spec", lambda name: None)
    path, why = wheels.wheel_model("magika", "models/*/model.onnx")
    assert path is None and why == ("the magika wheel is not installed (pip install -e '.[test]')")
    path, why = wheels.wheel_model("nudenet", "320n.onnx")
    assert path is None
    assert why == f"the nudenet wheel is not installed ({wheels.BENCH_INSTALL})"
    # one command, every benchmark wheel pinned to an exact version, no dependencies
    assert wheels.BENCH_INSTALL.startswith("pip install --no-deps ")
    assert all("==" in pin for pin in wheels.BENCH_WHEELS.values())
    assert "nudenet==3.4.2" in wheels.BENCH_INSTALL.split()


def test_the_last_matching_file_of_an_installed_package(tmp_path: Path, monkeypatch) -> None:
    pkg = tmp_path / "fakewheel"
    (pkg / "models" / "v1").mkdir(parents=True)
    (pkg / "models" / "v2").mkdir()
    for d in ("v1", "v2"):
        (pkg / "models" / d / "model.onnx").write_bytes(b"")
    (pkg / "__init__.py").write_text("")
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.delitem(sys.modules, "fakewheel", raising=False)
    path, why = wheels.wheel_model("fakewheel", "models/*/model.onnx")
    assert (path, why) == (pkg / "models" / "v2" / "model.onnx", "")
    path, why = wheels.wheel_model("fakewheel", "models/*/other.onnx")
    assert path is None and why == "no models/*/other.onnx inside the installed fakewheel wheel"
