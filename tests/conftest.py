"""Shared fixtures.

``mlflow_server``: one real ``mlflow server`` on 127.0.0.1 for the whole session, started
only when a test asks for it. It runs in its own process group (the server spawns worker
processes) and the whole group is stopped at teardown. If it does not come up, the test
fails with the tail of its stderr: a missing server is a broken environment, not a skip.
Mark tests that use it ``@pytest.mark.server`` and ``@pytest.mark.slow``.
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest

SERVER_START_TIMEOUT_S = 60.0

# A test run started in the background by a non-interactive shell (`pytest &`, some CI
# runners) inherits SIGINT as ignored, and so would every guard process the tests start:
# the interrupt tests would then measure the shell, not guard. Give SIGINT its normal
# meaning (KeyboardInterrupt here, the default in exec'd children), as at a terminal.
if signal.getsignal(signal.SIGINT) == signal.SIG_IGN:
    signal.signal(signal.SIGINT, signal.default_int_handler)


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _mlflow_executable() -> str:
    # The venv's own console script, so the server matches the client under test.
    candidate = Path(sys.executable).with_name("mlflow")
    return str(candidate) if candidate.exists() else "mlflow"


def _tail(path: Path, n: int = 3000) -> str:
    try:
        return path.read_text(errors="replace")[-n:]
    except OSError as exc:
        return f"<cannot read {path}: {exc}>"


def _healthy(url: str) -> bool:
    try:
        with urllib.request.urlopen(f"{url}/health", timeout=1.0) as resp:
            return resp.status == 200
    except (urllib.error.URLError, OSError):
        return False


def _stop_group(proc: subprocess.Popen[bytes]) -> None:
    try:
        pgid = os.getpgid(proc.pid)
    except ProcessLookupError:
        return
    for sig, wait_s in ((signal.SIGTERM, 10.0), (signal.SIGKILL, 5.0)):
        try:
            os.killpg(pgid, sig)
        except ProcessLookupError:
            return
        try:
            proc.wait(timeout=wait_s)
        except subprocess.TimeoutExpired:
            continue
        # The leader is gone; workers in the group may linger for a moment.
        deadline = time.monotonic() + wait_s
        while time.monotonic() < deadline:
            try:
                os.killpg(pgid, 0)
            except ProcessLookupError:
                return
            time.sleep(0.1)


@pytest.fixture(scope="session")
def mlflow_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """Start ``mlflow server`` on a free loopback port; yield its http URI."""
    root = tmp_path_factory.mktemp("mlflow_server")
    port = _free_port()
    url = f"http://127.0.0.1:{port}"
    cmd = [
        _mlflow_executable(),
        "server",
        "--host", "127.0.0.1",
        "--port", str(port),
        "--workers", "1",
        "--backend-store-uri", f"sqlite:///{root / 'm.db'}",
        "--artifacts-destination", str(root / "art"),
    ]  # fmt: skip
    env = dict(os.environ)
    env.update(
        MLFLOW_SERVER_ENABLE_JOB_EXECUTION="false",
        MLFLOW_DISABLE_TELEMETRY="true",
    )
    env.pop("MLFLOW_TRACKING_URI", None)
    stdout_path, stderr_path = root / "server.out", root / "server.err"
    with open(stdout_path, "wb") as out, open(stderr_path, "wb") as err:
        proc = subprocess.Popen(
            cmd, cwd=root, env=env, stdout=out, stderr=err, start_new_session=True
        )
    started = time.monotonic()
    try:
        while not _healthy(url):
            if proc.poll() is not None:
                pytest.fail(
                    f"mlflow server exited with {proc.returncode} before becoming healthy; "
                    f"stderr tail:\n{_tail(stderr_path)}",
                    pytrace=False,
                )
            if time.monotonic() - started > SERVER_START_TIMEOUT_S:
                pytest.fail(
                    f"mlflow server not healthy at {url}/health after "
                    f"{SERVER_START_TIMEOUT_S:.0f} s; stderr tail:\n{_tail(stderr_path)}",
                    pytrace=False,
                )
            time.sleep(0.25)
        elapsed = time.monotonic() - started
        sys.stderr.write(f"\nmlflow server healthy at {url} after {elapsed:.1f} s\n")
        yield url
    finally:
        _stop_group(proc)


# Lines a test wants in the terminal summary (e.g. the ONNX conformance pass count), shown
# even when the test passes and its output is captured.
_SUMMARY = pytest.StashKey[list]()


@pytest.fixture
def summary_line(request: pytest.FixtureRequest):
    """Call with a string to print it in pytest's terminal summary."""
    return request.config.stash.setdefault(_SUMMARY, []).append


def pytest_terminal_summary(terminalreporter, exitstatus, config) -> None:  # noqa: ARG001
    lines = config.stash.get(_SUMMARY, [])
    if lines:
        terminalreporter.section("guard summary")
        for line in lines:
            terminalreporter.write_line(line)
