"""The thread pool itself (guard.compiler.codegen.threadpool), driven from IR: tasks claimed
without a lock, each exactly once per step, the step complete when ``guard_pool_run``
returns, each thread's own run of tasks first; and many tiny split steps on 1, 2, 3 and 8
threads (more threads than CPUs: workers sleep and wake) equal to the reference."""

from __future__ import annotations

import ctypes

import numpy as np
import pytest
from onnx import helper

from guard.compiler import import_onnx, optimize, run_reference
from guard.compiler.codegen import split, threadpool
from guard.compiler.codegen.build import jit
from guard.compiler.codegen.llvm_target import _init_llvm, host_target
from guard.compiler.codegen.module import LoadedObject
from guard.compiler.ir.isa_table import table_for
from guard.compiler.partition.plan import plan

from .test_emitters import model, rnd

CALLS = 3000
WIDEST = 9  # call k runs 1 + k % WIDEST tasks

# count: task i adds 1 to a[i]. drive: CALLS calls of count with 1 + k % 9 tasks each;
# after each, the nine counters must hold every task run so far (a[9] counts the calls
# that returned early). meet: task i records its thread in a[8 + i] and waits (bounded)
# for task i ^ 2 to start; a[4 + i] is set if it waited in vain.
TEST_IR = r"""
declare void @guard_pool_run(ptr, ptr, ptr, ptr, i64)
declare i64 @pthread_self()
@PAUSE_DECL@

define internal void @count(i64 %i, ptr %a, ptr %w, ptr %p) nounwind {
  %slot = getelementptr i64, ptr %a, i64 %i
  %o = atomicrmw add ptr %slot, i64 1 monotonic
  ret void
}

define void @drive(ptr %a, i64 %calls) nounwind {
entry:
  br label %loop
loop:
  %k = phi i64 [ 0, %entry ], [ %k2, %sum_done ]
  %want = phi i64 [ 0, %entry ], [ %want2, %sum_done ]
  %go = icmp ult i64 %k, %calls
  br i1 %go, label %body, label %done
body:
  %m = urem i64 %k, @WIDEST@
  %n = add i64 %m, 1
  call void @guard_pool_run(ptr @count, ptr %a, ptr null, ptr null, i64 %n)
  %want2 = add i64 %want, %n
  br label %sum
sum:
  %j = phi i64 [ 0, %body ], [ %j2, %sum ]
  %acc = phi i64 [ 0, %body ], [ %acc2, %sum ]
  %slot = getelementptr i64, ptr %a, i64 %j
  %v = load i64, ptr %slot
  %acc2 = add i64 %acc, %v
  %j2 = add i64 %j, 1
  %more = icmp ult i64 %j2, @WIDEST@
  br i1 %more, label %sum, label %check
check:
  %ok = icmp eq i64 %acc2, %want2
  br i1 %ok, label %sum_done, label %early
early:
  %eslot = getelementptr i64, ptr %a, i64 @WIDEST@
  %e = load i64, ptr %eslot
  %e2 = add i64 %e, 1
  store i64 %e2, ptr %eslot
  br label %sum_done
sum_done:
  %k2 = add i64 %k, 1
  br label %loop
done:
  ret void
}

define internal void @meet(i64 %i, ptr %a, ptr %w, ptr %p) nounwind {
entry:
  %mine = getelementptr i64, ptr %a, i64 %i
  store atomic i64 1, ptr %mine release, align 8
  %tid = call i64 @pthread_self()
  %ti = add i64 %i, 8
  %tslot = getelementptr i64, ptr %a, i64 %ti
  store i64 %tid, ptr %tslot
  %partner = xor i64 %i, 2
  %theirs = getelementptr i64, ptr %a, i64 %partner
  br label %poll
poll:
  %r = phi i64 [ 0, %entry ], [ %r2, %wait ]
  %v = load atomic i64, ptr %theirs acquire, align 8
  %met = icmp ne i64 %v, 0
  br i1 %met, label %out, label %wait
wait:
  @PAUSE@
  %r2 = add i64 %r, 1
  %go = icmp ult i64 %r2, 100000000
  br i1 %go, label %poll, label %vain
vain:
  %fi = add i64 %i, 4
  %fslot = getelementptr i64, ptr %a, i64 %fi
  store i64 1, ptr %fslot
  br label %out
out:
  ret void
}

define void @meet4(ptr %a) nounwind {
  call void @guard_pool_run(ptr @meet, ptr %a, ptr null, ptr null, i64 4)
  ret void
}
"""


def _pool_object(threads: int) -> LoadedObject:
    """The pool and the test's tasks, compiled for the host and loaded, the pool started."""
    import llvmlite.binding as llvm

    _init_llvm()
    target = host_target()
    tm = target.target_machine()
    head = f'target triple = "{target.triple}"\ntarget datalayout = "{tm.target_data}"\n'
    pool_text = threadpool.pool_ir(target.triple)
    decl = pool_text[pool_text.index("declare void @llvm.") :].splitlines()[0]
    hint = next(line for line in pool_text.splitlines() if "call void @llvm." in line).strip()
    text = TEST_IR.replace("@WIDEST@", str(WIDEST)).replace("@PAUSE_DECL@", decl)
    mod = llvm.parse_assembly(head + text.replace("@PAUSE@", hint))
    mod.link_in(llvm.parse_assembly(head + pool_text))
    mod.verify()
    obj = LoadedObject(bytes(tm.emit_object(mod)), target)
    assert obj.start_threads(threads) == threads
    return obj


@pytest.mark.filterwarnings("ignore")
@pytest.mark.parametrize("threads", [1, 2, 3, 8])
def test_every_task_runs_once_and_the_step_is_done_on_return(threads):
    """3000 steps of 1-9 tiny tasks each: every task ran exactly once per step, and every
    one had finished when guard_pool_run returned (8 threads on fewer CPUs: sleeps and
    wake-ups between the steps)."""
    obj = _pool_object(threads)
    a = np.zeros(16, np.int64)
    ctypes.CFUNCTYPE(None, ctypes.c_void_p, ctypes.c_int64)(obj.address("drive"))(
        a.ctypes.data, CALLS
    )
    k = np.arange(CALLS)
    want = [(1 + k % WIDEST > i).sum() for i in range(WIDEST)]
    assert a[:WIDEST].tolist() == want
    assert a[WIDEST] == 0  # no call returned before its tasks had finished


def test_each_thread_takes_its_own_run_of_tasks_first():
    """Four tasks on two threads: the caller takes tasks 0 and 1, the worker 2 and 3, so
    the same slice of consecutive steps stays with the same core. Task i waits for task
    i ^ 2 to start: a pool that dealt the tasks out in turn (caller 0, worker 1) would
    leave both waiting in vain."""
    obj = _pool_object(2)
    meet = ctypes.CFUNCTYPE(None, ctypes.c_void_p)(obj.address("meet4"))
    for _ in range(20):
        a = np.zeros(12, np.int64)
        meet(a.ctypes.data)
        assert a[:4].tolist() == [1, 1, 1, 1] and a[4:8].tolist() == [0, 0, 0, 0]
        caller, worker = a[8], a[10]
        assert a[9] == caller and a[11] == worker and caller != worker


def _chain(c: int, hw: int, depth: int):
    """``depth`` small depthwise convolutions with ReLU, one after another."""
    nodes, weights, prev = [], [], "x"
    for i in range(depth):
        nodes += [
            helper.make_node("Conv", [prev, f"w{i}"], [f"c{i}"], pads=[1, 1, 1, 1], group=c),
            helper.make_node("Relu", [f"c{i}"], [f"r{i}"]),
        ]
        weights.append((f"w{i}", rnd(c, 1, 3, 3)))
        prev = f"r{i}"
    nodes.append(helper.make_node("Identity", [prev], ["y"]))
    return model(nodes, [("x", [1, c, hw, hw])], ["y"], weights)


@pytest.mark.filterwarnings("ignore:threads. .* is more than")
def test_many_tiny_split_steps_match_the_reference_on_any_thread_count(monkeypatch):
    """Forty depthwise convolutions of a few microseconds each, every one split (the cost
    rule's floor lowered): 1, 2, 3 and 8 threads give the same bits, run after run, equal
    to the reference."""
    monkeypatch.setattr(split, "MIN_TASK_FLOPS", 1)
    m = _chain(32, 10, 40)
    g0 = import_onnx(m, {})
    g, _ = optimize(
        g0, "O2", target=table_for("avx512" if host_target().vector_width == 16 else "avx2")
    )
    compiled = plan(g)
    x = np.random.default_rng(3).standard_normal((1, 32, 10, 10)).astype(np.float32)
    code, outs = None, []
    for threads in (1, 2, 3, 8):
        rt, code = jit(compiled, threads=threads, code=code)
        assert sum(1 for s in code.plan.steps() if len(s.parts) >= 2) >= 40
        runs = [rt.run({"x": x})["y"] for _ in range(30)]
        assert all(np.array_equal(runs[0], r) for r in runs[1:])
        outs.append(runs[0])
    assert all(np.array_equal(outs[0], o) for o in outs[1:])
    ref = run_reference(g0, {"x": x})["y"]
    np.testing.assert_allclose(outs[0], ref, rtol=1e-4, atol=1e-5)
