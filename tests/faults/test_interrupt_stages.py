"""Ctrl-C at every stage of ``guard run``: exit 130, a headline that says interrupted, no
traceback from guard or from any process it started (issue 28 item 7).

A terminal's Ctrl-C sends SIGINT to the whole foreground process group: guard and the
children it forked (a build, a golden) get it; round workers run in sessions of their own
and are ended by guard. Each test stops a real ``guard run`` at one stage, as a terminal
would (``os.killpg``), and reads what the user would see.
"""

from __future__ import annotations

import os
import signal
import subprocess
import textwrap
import time
from pathlib import Path

import pytest
from faults_helpers import guard_subprocess, small_convnet, suite_of

pytestmark = pytest.mark.slow


def _ctrl_c_when(
    proc: subprocess.Popen, marker: Path, timeout_s: float = 180, then: Path | None = None
) -> tuple[str, str]:
    """SIGINT to guard's process group once ``marker`` exists (then touch ``then``); guard's
    stdout and stderr."""
    deadline = time.monotonic() + timeout_s
    while not marker.exists():
        if proc.poll() is not None:
            out, err = proc.communicate()
            raise AssertionError(f"guard ended (rc {proc.returncode}) first: {err[-2000:]}")
        if time.monotonic() > deadline:
            os.killpg(proc.pid, signal.SIGKILL)
            raise AssertionError("the stage was never reached")
        time.sleep(0.05)
    os.killpg(proc.pid, signal.SIGINT)
    if then is not None:
        time.sleep(0.5)
        then.touch()
    return proc.communicate(timeout=120)


def _assert_interrupted(proc: subprocess.Popen, out: str, err: str, *, headline: bool) -> None:
    assert proc.returncode == 130, err
    assert "Traceback" not in err and "Error:" not in err.replace("guard: error:", ""), err
    assert "interrupted" in err, err
    if headline:  # the console's verdict line: never a green tick for a run cut short
        assert "interrupted" in out and "✅" not in out, out


def _run(tmp_path: Path, workdir: Path, patch: str, env: dict | None = None) -> subprocess.Popen:
    suite = suite_of(tmp_path, {"m0": small_convnet(tmp_path / "m0.onnx")})
    return guard_subprocess(["run", str(suite), "--no-track"], workdir, patch, env=env)


def test_ctrl_c_while_importing_the_command(tmp_path, workdir):
    """The command's modules are imported when it runs; a Ctrl-C there is no import-chain
    traceback."""
    marker = tmp_path / "importing"
    patch = f"""
    import importlib.abc, pathlib
    class Slow(importlib.abc.MetaPathFinder):
        def find_spec(self, name, path, target=None):
            if name == "guard.run.runner":
                pathlib.Path({str(marker)!r}).touch()
                time.sleep(600)
            return None
    sys.meta_path.insert(0, Slow())
    """
    proc = _run(tmp_path, workdir, patch)
    out, err = _ctrl_c_when(proc, marker)
    _assert_interrupted(proc, out, err, headline=False)


def test_ctrl_c_while_building_the_parser(tmp_path, workdir):
    """Before the arguments are parsed (guard's own start-up imports)."""
    marker = tmp_path / "parsing"
    patch = f"""
    import argparse, pathlib
    _parse = argparse.ArgumentParser.parse_args
    def parse_args(self, *a, **k):
        pathlib.Path({str(marker)!r}).touch()
        time.sleep(600)
    argparse.ArgumentParser.parse_args = parse_args
    """
    proc = _run(tmp_path, workdir, patch)
    out, err = _ctrl_c_when(proc, marker)
    _assert_interrupted(proc, out, err, headline=False)


def test_ctrl_c_while_building(tmp_path, workdir):
    """In the forked build child: the child goes quietly, guard reports no result."""
    marker = tmp_path / "building"
    patch = f"""
    import pathlib
    import guard.backends.onnxruntime as ort
    _build = ort.OnnxRuntimeBackend.build
    def build(self, req):
        pathlib.Path({str(marker)!r}).touch()
        time.sleep(600)
    ort.OnnxRuntimeBackend.build = build
    """
    proc = _run(tmp_path, workdir, patch)
    out, err = _ctrl_c_when(proc, marker)
    _assert_interrupted(proc, out, err, headline=True)


def test_ctrl_c_while_round_workers_start(tmp_path, workdir):
    """The reported case: round workers still importing their backends when guard stops
    wrote a BrokenPipeError traceback, and the headline was a green tick."""
    marker, go = tmp_path / "starting", tmp_path / "go"
    slow = tmp_path / "slow_site"
    slow.mkdir()
    # Round workers (fresh interpreters) are still starting when the Ctrl-C comes, as on a
    # loaded runner: each waits for the test's go-ahead, given once guard has the signal.
    (slow / "sitecustomize.py").write_text(
        textwrap.dedent(
            f"""
            import os, sys, time
            if "guard.measure.round_worker" in sys.orig_argv:
                while not os.path.exists({str(go)!r}):
                    time.sleep(0.02)
            """
        )
    )
    patch = f"""
    import pathlib
    import guard.measure.round_runner as rr
    _wait = rr.RoundWorkers.wait_ready
    def wait_ready(self, *a, **k):
        pathlib.Path({str(marker)!r}).touch()
        return _wait(self, *a, **k)
    rr.RoundWorkers.wait_ready = wait_ready
    """
    env = {"PYTHONPATH": os.pathsep.join([str(slow), os.environ.get("PYTHONPATH", "")])}
    proc = _run(tmp_path, workdir, patch, env=env)
    out, err = _ctrl_c_when(proc, marker, then=go)
    # communicate() read stderr to its end: a worker still holding it wrote there first
    _assert_interrupted(proc, out, err, headline=True)


def test_ctrl_c_while_producing_the_golden(tmp_path, workdir):
    marker = tmp_path / "golden"
    patch = f"""
    import pathlib
    import guard.golden.produce as produce
    def produce_outputs(*a, **k):
        pathlib.Path({str(marker)!r}).touch()
        time.sleep(600)
    produce.ensure_golden = produce_outputs
    import guard.run.runner as runner
    runner.ensure_golden = produce_outputs
    """
    proc = _run(tmp_path, workdir, patch)
    out, err = _ctrl_c_when(proc, marker)
    _assert_interrupted(proc, out, err, headline=True)
