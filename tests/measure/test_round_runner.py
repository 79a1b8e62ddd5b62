"""Where measurement rounds run: each in a round worker (a fresh interpreter) of its own."""

from __future__ import annotations

import os
import sys
import textwrap
from dataclasses import replace
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "run"))
from run_helpers import small_convnet, write_suite  # noqa: E402

from guard.core.errors import InternalError, UsageError  # noqa: E402
from guard.core.isolate import ENV_DISABLE, NativeCrashError, StepTimeoutError  # noqa: E402
from guard.measure import MeasureConfig  # noqa: E402
from guard.measure.round_runner import (  # noqa: E402
    SESSION,
    WORKER,
    RoundJob,
    RoundWorkers,
    measuring_cpus,
    round_isolation,
    worker_count,
)
from guard.run.case import prepare_cases  # noqa: E402

CFG = MeasureConfig(warmup_s=0.0, min_iters=6, min_time_s=0.0, max_time_s=2.0, rounds=3)
# Loaded first by every worker started from a test below (sitecustomize on PYTHONPATH): a
# session whose artefact path holds "crash" dies by SIGSEGV, one with "hang" never loads,
# and every load writes the worker's pid and cores beside the artefact.
SITE = """
import os, signal, time
import guard.emulate.load as load
_real = load.load_session
def load_session(backend, artefact, threads, manifest):
    marks = os.environ.get("GUARD_TEST_MARKS")
    if marks:
        cpus = ",".join(map(str, sorted(os.sched_getaffinity(0))))
        with open(os.path.join(marks, f"{os.getpid()}.{time.monotonic_ns()}"), "w") as f:
            f.write(cpus)
    if "crash" in os.environ.get("GUARD_TEST_FAULT", ""):
        os.kill(os.getpid(), signal.SIGSEGV)
    if "hang" in os.environ.get("GUARD_TEST_FAULT", ""):
        time.sleep(3600)
    if "refuse" in os.environ.get("GUARD_TEST_FAULT", ""):
        from guard.core.errors import UsageError
        raise UsageError("the artefact was refused", where="suite.yaml: models[0]")
    if "odd" in os.environ.get("GUARD_TEST_FAULT", ""):
        class OddError(Exception):  # defined here: it cannot be pickled back
            pass
        raise OddError("nothing to send back")
    return _real(backend, artefact, threads, manifest)
load.load_session = load_session
"""


@pytest.fixture(scope="module")
def job(tmp_path_factory) -> RoundJob:
    d = tmp_path_factory.mktemp("rounds")
    small_convnet(d / "m.onnx")
    suite = write_suite(
        d,
        f"""
        schema_version: 1
        suite: rounds
        defaults: {{backends: [onnxruntime], threads: 1}}
        models:
          - name: m
            source: {d / "m.onnx"}
        """,
    )
    (case,) = prepare_cases(suite, d)
    return RoundJob(
        "m", "onnxruntime", "suite.yaml: models[0]", case.artefact, case.manifest, 1,
        case.feeds, CFG,
    )  # fmt: skip


@pytest.fixture
def site(tmp_path, monkeypatch) -> Path:
    (tmp_path / "site").mkdir()
    (tmp_path / "site" / "sitecustomize.py").write_text(textwrap.dedent(SITE))
    (tmp_path / "marks").mkdir()
    monkeypatch.setenv("PYTHONPATH", str(tmp_path / "site"))
    monkeypatch.setenv("GUARD_TEST_MARKS", str(tmp_path / "marks"))
    monkeypatch.delenv("GUARD_TEST_FAULT", raising=False)
    monkeypatch.delenv(ENV_DISABLE, raising=False)
    return tmp_path / "marks"


def _loads(marks: Path) -> list[tuple[int, str]]:
    by_time = sorted(marks.iterdir(), key=lambda p: int(p.name.split(".")[1]))
    return [(int(p.name.split(".")[0]), p.read_text()) for p in by_time]


def test_rounds_run_in_workers_by_default_and_in_process_when_asked(monkeypatch):
    monkeypatch.delenv(ENV_DISABLE, raising=False)
    assert round_isolation() == WORKER
    assert round_isolation(clock_injected=True) == SESSION  # a fake clock stays here
    monkeypatch.setenv(ENV_DISABLE, "1")
    assert round_isolation() == SESSION


def test_each_round_is_a_fresh_interpreter_pinned_to_the_measuring_cores(job, site):
    with RoundWorkers(3, ("onnxruntime",)) as workers:
        workers.start([1])
        workers.wait_ready()  # interpreters up before anything is measured beside them
        assert all(w.ready for w in workers._workers.values()) and len(workers._workers) == 3
        got = [workers.measure(i, job) for i in range(3)]
        again = workers.measure(3, job)  # round 4 goes back to worker 0
    assert all(t.samples_s and len(t.samples_s) >= 2 for t in [*got, again])
    loads = _loads(site)
    pids = [pid for pid, _ in loads]
    assert len(loads) == 4 and len(set(pids[:3])) == 3 and os.getpid() not in pids
    assert pids[3] == pids[0]
    want = ",".join(map(str, sorted(measuring_cpus(1) or ())))
    assert {cpus for _, cpus in loads} == {want}


def test_a_round_whose_worker_crashes_names_the_round_and_the_next_gets_a_new_one(
    job, site, monkeypatch
):
    with RoundWorkers(2, ("onnxruntime",)) as workers:
        workers.measure(0, job)
        monkeypatch.setenv("GUARD_TEST_FAULT", "crash")
        workers.start([2])  # a worker for another thread count starts with the crash armed
        monkeypatch.delenv("GUARD_TEST_FAULT")
        crashing = replace(job, threads=2)
        with pytest.raises(NativeCrashError, match=r"round 2 of 3 of m on onnxruntime.*SIGSEGV"):
            workers.measure(1, crashing)
        assert workers.measure(1, crashing).samples_s  # a new worker, started unarmed


@pytest.mark.slow
def test_a_round_that_hangs_is_stopped_at_its_limit(job, site, monkeypatch):
    import guard.measure.round_runner as rr

    monkeypatch.setattr(rr, "ROUND_TIMEOUT_S", 3.0)
    monkeypatch.setattr(rr, "START_TIMEOUT_S", 20.0)
    monkeypatch.setenv("GUARD_TEST_FAULT", "hang")
    with RoundWorkers(1, ("onnxruntime",)) as workers:
        with pytest.raises(StepTimeoutError, match=r"round 1 of 3 of m .*time limit"):
            workers.measure(0, job)


def test_worker_count_defaults_to_one_per_round_and_refuses_nonsense(monkeypatch):
    monkeypatch.delenv("GUARD_ROUND_WORKERS", raising=False)
    assert worker_count(3) == 3 and worker_count(10) == 10 and worker_count(40) == 10
    monkeypatch.setenv("GUARD_ROUND_WORKERS", "4")
    assert worker_count(10) == 4
    monkeypatch.setenv("GUARD_ROUND_WORKERS", "zero")
    with pytest.raises(UsageError, match="GUARD_ROUND_WORKERS must be a positive integer"):
        worker_count(10)


@pytest.mark.parametrize(
    ("fault", "error", "message"),
    [
        ("refuse", UsageError, r"^suite.yaml: models\[0\]: the artefact was refused$"),
        (
            "odd",
            InternalError,
            r"^suite.yaml: models\[0\]: round 1 of 3 of m on onnxruntime: OddError: nothing to send back$",
        ),
    ],
)
def test_an_error_in_a_round_comes_back_as_itself_or_as_text(
    job, site, monkeypatch, fault, error, message
):
    """A worker's exception is raised here as it was raised there; one that cannot be
    pickled comes back as text naming the round (guard.core.isolate's reply, shared)."""
    monkeypatch.setenv("GUARD_TEST_FAULT", fault)
    with RoundWorkers(1, ("onnxruntime",)) as workers:
        with pytest.raises(error, match=message) as info:
            workers.measure(0, job)
        assert info.value.exit_code == (2 if error is UsageError else 3)
        monkeypatch.delenv("GUARD_TEST_FAULT")
        workers._drop(0, 1)  # the armed worker goes; a fresh one measures
        assert workers.measure(0, job).samples_s
