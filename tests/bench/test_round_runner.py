"""Where measurement rounds run: each in its own forked child unless isolation is off."""

from __future__ import annotations

import os
import signal

import pytest

from guard.bench import MeasureConfig, measure_rounds
from guard.isolate import ENV_DISABLE, NativeCrashError
from guard.round_runner import PROCESS, SESSION, isolated_rounds, measuring_cpus, round_isolation

CFG = MeasureConfig(warmup_s=0.0, min_iters=3, min_time_s=0.0, max_time_s=1.0, rounds=3)


def test_rounds_run_in_forked_children_by_default(monkeypatch, tmp_path):
    monkeypatch.delenv(ENV_DISABLE, raising=False)
    assert round_isolation("onnxruntime") == PROCESS

    def load(i: int):
        (tmp_path / f"round{i}").write_text(str(os.getpid()))
        return lambda: None

    runner = isolated_rounds(CFG, "m", "onnxruntime", "suite.yaml: models[0]")
    rt = measure_rounds(load, CFG, run_round=runner)
    pids = {int((tmp_path / f"round{i}").read_text()) for i in range(3)}
    assert len(rt.rounds) == 3 and all(t.samples_s for t in rt.rounds)
    assert len(pids) == 3 and os.getpid() not in pids  # a child of its own per round


def test_isolation_off_runs_rounds_here(monkeypatch):
    monkeypatch.setenv(ENV_DISABLE, "1")
    assert round_isolation("onnxruntime") == SESSION


def test_a_round_that_crashes_names_the_round(monkeypatch):
    monkeypatch.delenv(ENV_DISABLE, raising=False)

    def load(i: int):
        if i == 1:
            os.kill(os.getpid(), signal.SIGSEGV)
        return lambda: None

    runner = isolated_rounds(CFG, "m", "onnxruntime", "suite.yaml: models[0]")
    with pytest.raises(NativeCrashError, match=r"round 2 of 3 of m on onnxruntime.*SIGSEGV"):
        measure_rounds(load, CFG, run_round=runner)


def test_each_round_runs_pinned_to_the_measuring_cores(monkeypatch, tmp_path):
    monkeypatch.delenv(ENV_DISABLE, raising=False)
    want = measuring_cpus(1)
    assert want is not None and len(want) == 1 and want <= os.sched_getaffinity(0)

    def load(i: int):
        (tmp_path / f"cpus{i}").write_text(",".join(map(str, sorted(os.sched_getaffinity(0)))))
        return lambda: None

    measure_rounds(load, CFG, run_round=isolated_rounds(CFG, "m", "onnxruntime", "s", 1))
    seen = {(tmp_path / f"cpus{i}").read_text() for i in range(3)}
    assert seen == {",".join(map(str, sorted(want)))}
    assert os.sched_getaffinity(0) != want or len(os.sched_getaffinity(0)) == 1  # parent not pinned
