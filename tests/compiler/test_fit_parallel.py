"""guard fit's timing builds compiled side by side in worker processes
(guard.compiler.fit.parallel): the objects and the cache entries are the bytes the serial
path makes, a worker's GuardError is the serial path's, no worker outlives an interrupt,
and the deadline's list schedule counts the workers."""

from __future__ import annotations

import json
import multiprocessing
import os
from pathlib import Path

import pytest

from guard.compiler import import_onnx, optimize
from guard.compiler.codegen.build import plan_kernels
from guard.compiler.codegen.llvm_target import codegen_target
from guard.compiler.fit.ladder import climb
from guard.compiler.fit.parallel import Compiler, schedule
from guard.compiler.runtime.weights import pack_weights
from guard.core.errors import UsageError
from guard.zoo import model_path


@pytest.fixture(scope="module")
def kplans():
    g, _ = optimize(import_onnx(model_path("inception_block"), None), "O2")
    lad = climb(g, 1024, stop_at_fit=False)
    plans = {id(s.plan): s.plan for s in lad.steps if s.plan is not None}
    assert len(plans) >= 2
    tgt = codegen_target("host")
    out = []
    for p in plans.values():
        _, layout = pack_weights({k: c.data for k, c in p.graph.constants.items()})
        out.append(plan_kernels(p, layout, tgt)[0])
    return tgt, out


def _compile_all(tgt, kplans, root, workers):
    with Compiler(tgt, root, workers) as c:
        assert c.workers == workers
        for i, k in enumerate(kplans):
            c.submit(i, k)
        return [c.result(i)[0] for i in range(len(kplans))]


def _entries(root):
    out = {}
    for d in sorted(root.iterdir()):
        meta = json.loads((d / "entry.json").read_text())
        meta.pop("build_s")  # the seconds it took, not the object
        out[d.name] = ((d / "kernels.o").read_bytes(), meta)
    return out


def test_workers_make_the_serial_objects_and_cache_entries(kplans, tmp_path):
    tgt, ks = kplans
    serial = _compile_all(tgt, ks, tmp_path / "serial", 1)
    side = _compile_all(tgt, ks, tmp_path / "parallel", 2)
    for a, b in zip(serial, side, strict=True):
        assert a.object_code == b.object_code
        assert a.ir_text == b.ir_text and a.kernels == b.kernels
    entries = _entries(tmp_path / "serial")
    assert len(entries) == len(ks)
    assert _entries(tmp_path / "parallel") == entries  # same keys, objects, metadata
    again = _compile_all(tgt, ks, tmp_path / "parallel", 2)  # every key found: read back
    assert [g.object_code for g in again] == [g.object_code for g in serial]
    assert all(g.ir_text == "" for g in again)


class Unemittable:
    """A kernel plan whose steps cannot be read (a GuardError with fields)."""

    def steps(self):
        raise UsageError("no partitions here", where="plan.onnx", hint="Bind the input.")


def test_a_workers_guard_error_is_the_serial_one(kplans):
    tgt, ks = kplans
    raised = []
    for workers in (1, 2):
        with pytest.raises(UsageError) as info, Compiler(tgt, None, workers) as c:
            c.submit(0, ks[0])
            c.submit(1, Unemittable())
            c.result(0)
            c.result(1)
        e = info.value
        raised.append((type(e), str(e), e.args, e.where, e.hint, e.exit_code))
    assert raised[0] == raised[1]
    assert raised[0][3:5] == ("plan.onnx", "Bind the input.")
    assert all(_gone(p.pid) for p in multiprocessing.active_children())


def test_an_interrupt_leaves_no_worker(kplans):
    tgt, ks = kplans
    procs = []
    with pytest.raises(KeyboardInterrupt), Compiler(tgt, None, 2) as c:
        for i, k in enumerate(ks):
            c.submit(i, k)
        procs = list(c._pool._processes.values())
        assert procs
        raise KeyboardInterrupt
    assert all(_gone(p.pid) for p in procs)


def _gone(pid: int) -> bool:
    """Whether process ``pid`` has ended, asked of the OS: Process.is_alive() and
    active_children() can answer True for a dead worker, since the executor's manager thread
    may reap it (waitpid) before our join does, which then sees ECHILD and leaves its
    returncode unset."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True  # ended and reaped
    stat = Path(f"/proc/{pid}/stat")
    try:
        return stat.read_text().rsplit(")", 1)[1].split()[0] in "ZX"  # dead, not reaped yet
    except FileNotFoundError:
        return True  # reaped since the kill


def test_the_schedule_counts_the_workers():
    jobs = [(1, 10.0), (2, 10.0), (3, 10.0), (4, 1.0)]
    fits = lambda end: end <= 15.0  # noqa: E731
    assert schedule(0.0, jobs, 1, fits) == [1, 4]  # one after another: 10, (20), (30), 11
    assert schedule(0.0, jobs, 2, fits) == [1, 2, 4]  # two at once: 10 | 10, (20), 11
    assert schedule(0.0, jobs, 3, fits) == [1, 2, 3, 4]
    assert schedule(6.0, jobs, 2, fits) == [4]  # from a later start only the short one


def test_without_a_deadline_each_plan_compiles_while_the_next_is_planned(monkeypatch, tmp_path):
    """measure() submits an uncached plan as soon as its kernel plan is made, so the
    workers compile while the next plan's constants are packed; the cached ones are not."""
    from guard.compiler.fit import measure as m

    g, _ = optimize(import_onnx(model_path("inception_block"), None), "O2")
    lad = climb(g, 1024, stop_at_fit=False)
    events: list[str] = []
    real_plan, real_submit = m.plan_kernels, Compiler.submit

    def planned(*a, **k):
        events.append("plan")
        return real_plan(*a, **k)

    def submitted(self, job, kplan):
        events.append("submit")
        return real_submit(self, job, kplan)

    monkeypatch.setattr(m, "plan_kernels", planned)
    monkeypatch.setattr(Compiler, "submit", submitted)
    monkeypatch.setattr(m, "available_cpus", lambda: 2)
    done = m.measure(lad, seconds=0.05, cache=tmp_path)
    n = len(events) // 2
    assert n >= 2 and events == ["plan", "submit"] * n
    assert all(s.latency_cost_pct is not None for s in done.steps if s.plan is not None)
    events.clear()
    m.measure(lad, seconds=0.05, cache=tmp_path)  # every object cached: nothing submitted
    assert events == ["plan"] * n
    assert all(_gone(p.pid) for p in multiprocessing.active_children())
