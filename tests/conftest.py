"""Shared fixtures.

``mlflow_server``: one real ``mlflow server`` on 127.0.0.1 for the whole session, started
only when a test asks for it (tests/mlflow_proc.py, shared with the scale tests' stack). It
runs in its own process group (the server spawns worker processes) and the whole group is
stopped at teardown. If it does not come up, the test fails with the tail of its stderr: a
missing server is a broken environment, not a skip.
Mark tests that use it ``@pytest.mark.server`` and ``@pytest.mark.slow``.
"""

from __future__ import annotations

import signal
import sys
import time
from collections.abc import Iterator

import pytest
from mlflow_proc import MlflowServer

SERVER_START_TIMEOUT_S = 60.0

# A test run started in the background by a non-interactive shell (`pytest &`, some CI
# runners) inherits SIGINT as ignored, and so would every guard process the tests start:
# the interrupt tests would then measure the shell, not guard. Give SIGINT its normal
# meaning (KeyboardInterrupt here, the default in exec'd children), as at a terminal.
if signal.getsignal(signal.SIGINT) == signal.SIG_IGN:
    signal.signal(signal.SIGINT, signal.default_int_handler)


@pytest.fixture(scope="session")
def mlflow_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """Start ``mlflow server`` on a free loopback port; yield its http URI."""
    root = tmp_path_factory.mktemp("mlflow_server")
    server = MlflowServer(f"sqlite:///{root / 'm.db'}", root)
    started = time.monotonic()
    try:
        server.start(timeout_s=SERVER_START_TIMEOUT_S)
    except RuntimeError as exc:
        pytest.fail(str(exc), pytrace=False)
    try:
        elapsed = time.monotonic() - started
        sys.stderr.write(f"\nmlflow server healthy at {server.url} after {elapsed:.1f} s\n")
        yield server.url
    finally:
        server.stop()


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
