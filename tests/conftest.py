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


# -- the heavy tier ----------------------------------------------------------------------
# Slow tests that .ci/run leaves out, to keep a CI run within its time (issue: the whole
# run under 60 minutes on a 2-core machine): the full sweeps, whose every point repeats a
# mechanism a kept point already covers. Each entry is a test id prefix (file::name[param]),
# with its duration in the last full slow run on a 2-core znver5 (`pytest -m slow
# --durations=80`). `pytest -m heavy` runs exactly these; `pytest -m slow` runs them too.
_EMULATED_BIG = ("vgg19", "resnet50", "densenet121", "zfnet512", "inception_v1", "inception_v2")
_KILL_KEPT = ("journal", "store.transaction", "mlflow.log_child@2")  # one per stage
_SERVER_KILL_KEPT = ("journal", "mlflow.log_child")
HEAVY: tuple[str, ...] = (
    # qemu-aarch64 on the largest zoo models and light topologies: 9-103 s each (mlp,
    # digits, squeezenet, shufflenet, alexnet, the transformer and the rest stay)
    *(f"tests/emulate/test_emulate_bundled.py::test_every_zoo_model_under_emulation_equals_"
      f"the_reference[{m}]" for m in _EMULATED_BIG),
    *(f"tests/emulate/test_emulate_bundled.py::test_the_light_topologies_under_emulation_"
      f"equal_the_reference[light_{m}]" for m in _EMULATED_BIG),
    # 84 s and 58 s: eight writers with a server restart, four concurrent shards
    "tests/scale/test_stack.py::test_eight_writers_and_a_server_restart_lose_nothing",
    "tests/scale/test_stack.py::test_four_shards_concurrently_merge_into_one_run",
    "tests/prepare/test_calibrate_command.py::test_calibrate_cli_on_the_smoke_suite",  # 60 s
    "tests/compiler/codegen/test_conv.py::test_every_schedule_point_matches_the_reference[dense]",
    "tests/experiment/test_bisect.py::test_a_real_bisection_names",  # 23 s; logic stays fast
    "tests/faults/test_build_faults.py::test_concurrent_runs_on_one_workdir",  # 31 s
    # vgg19 (548 MB of weights) through every path: 7-21 s each
    "tests/compiler/codegen/test_models_native.py::test_zoo_model_through_generated_code[vgg19]",
    "tests/zoo/test_zoo_models.py::test_light_model[vgg19]",
    "tests/zoo/test_zoo_models.py::test_light_model_is_deterministic[vgg19]",
    "tests/compiler/test_models.py::test_zoo_model_matches_onnxruntime_after_o2[vgg19]",
    # whole int8 models built for AVX2 (x86-64-v3): minutes of LLVM each; ShuffleNet stays
    *(f"tests/compiler/test_int8_models.py::test_the_avx2_build_equals_the_reference_too[{m}]"
      for m in ("inception_v2", "densenet121", "zfnet512")),
)  # fmt: skip


def _heavy(nodeid: str) -> bool:
    if nodeid.startswith(HEAVY):
        return True
    for test, kept in (
        ("tests/faults/test_kill_points.py::test_kill_at_each_point", _KILL_KEPT),
        ("tests/faults/test_kill_points_server.py::test_kill_at_each_point", _SERVER_KILL_KEPT),
    ):  # every kill point but one per stage: ~20 s each
        if nodeid.startswith(test) and "[" in nodeid:
            return nodeid.split("[", 1)[1].rstrip("]") not in kept
    return False


def pytest_collection_modifyitems(config, items) -> None:  # noqa: ARG001
    for item in items:
        if _heavy(item.nodeid):
            item.add_marker(pytest.mark.heavy)
