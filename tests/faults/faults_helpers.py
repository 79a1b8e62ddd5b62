"""Helpers for the fault tests: suites of small real models, and guard in a subprocess with
a fault injected at a chosen point (a uniquely named module, not conftest)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

from run_helpers import FAST_MEASURE, small_convnet, write_suite

__all__ = [
    "FAST_MEASURE",
    "guard_subprocess",
    "kill_when",
    "small_convnet",
    "suite_of",
    "write_suite",
]


def suite_of(
    tmp_path: Path,
    models: dict[str, Path],
    backends: str = "[onnxruntime]",
    extra: str = "",
    name: str = "faults",
) -> Path:
    """A suite with one entry per (name, model file), bound like small_convnet."""
    entries = "".join(
        f"""
      - name: {n}
        source: {p}
        inputs: {{x: {{shape: [1, 3, 16, 16]}}}}"""
        for n, p in models.items()
    )
    return write_suite(
        tmp_path,
        f"""
    schema_version: 1
    suite: {name}
    defaults:
      backends: {backends}
      measure: {FAST_MEASURE}
      {extra}
    models:{entries}
    """,
        name=f"{name}.yaml",
    )


# Runs guard's CLI after applying PATCH (Python source) in the same process: the way to put
# a fault at a chosen point of a real guard process that the test then kills or watches.
_RUNNER = """
import os, sys, time
sys.argv = ["guard", *{argv!r}]
{patch}
from guard.cli.main import main
sys.exit(main(sys.argv[1:]))
"""


def guard_subprocess(
    argv: list[str], cwd: Path, patch: str = "", env: dict | None = None, **popen
) -> subprocess.Popen:
    """Start ``guard ARGV`` in a new process group with PATCH applied first."""
    code = _RUNNER.format(argv=argv, patch=textwrap.dedent(patch))
    full_env = {**os.environ, "MLFLOW_DISABLE_TELEMETRY": "true", **(env or {})}
    full_env.pop("MLFLOW_TRACKING_URI", None) if "MLFLOW_TRACKING_URI" not in (env or {}) else None
    return subprocess.Popen(
        [sys.executable, "-c", code],
        cwd=cwd,
        env=full_env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
        **popen,
    )


def kill_when(
    proc: subprocess.Popen, marker: Path, sig: int = signal.SIGKILL, timeout_s: float = 120
) -> None:
    """Send ``sig`` to the process group of ``proc`` once ``marker`` exists."""
    deadline = time.monotonic() + timeout_s
    while not marker.exists():
        if proc.poll() is not None:
            out, err = proc.communicate()
            raise AssertionError(
                f"guard ended (rc {proc.returncode}) before the fault point: {err[-2000:]}"
            )
        if time.monotonic() > deadline:
            os.killpg(proc.pid, signal.SIGKILL)
            raise AssertionError("the fault point was never reached")
        time.sleep(0.05)
    os.killpg(proc.pid, sig) if sig == signal.SIGKILL else os.kill(proc.pid, sig)


def results(path: Path) -> list[dict]:
    return json.loads(path.read_text())["results"]
