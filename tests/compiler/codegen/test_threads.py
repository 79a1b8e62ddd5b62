"""The generated code on N threads: a persistent pool per loaded object, steps split into
tasks that each write one slice of the output, outputs bit-identical for any N."""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import helper

from guard.compiler import import_onnx, optimize, run_reference
from guard.compiler.codegen import split
from guard.compiler.codegen.build import jit
from guard.compiler.codegen.kernel_plan import Operand, Step
from guard.compiler.ir.isa_table import table_for
from guard.compiler.partition.plan import plan

from ._jit import TARGETS, skip_unless_runnable
from .test_emitters import model, rnd


def _net(c: int, hw: int) -> onnx.ModelProto:
    """Stem, a residual block (its add in the second conv's epilogue), a conv whose
    epilogue adds its own input, a depthwise conv with a per-channel scale, a 1x1 conv."""
    nodes = [
        helper.make_node("Conv", ["x", "w0"], ["a"], pads=[1, 1, 1, 1]),
        helper.make_node("Relu", ["a"], ["r"]),
        helper.make_node("Conv", ["r", "w1", "b1"], ["b"], pads=[1, 1, 1, 1]),
        helper.make_node("Conv", ["b", "w4"], ["b2"], pads=[1, 1, 1, 1]),
        helper.make_node("Add", ["b2", "r"], ["s0"]),
        helper.make_node("Conv", ["s0", "w5"], ["b3"], pads=[1, 1, 1, 1]),
        helper.make_node("Add", ["b3", "s0"], ["s"]),
        helper.make_node("Conv", ["s", "w2"], ["d"], pads=[1, 1, 1, 1], group=c),
        helper.make_node("Mul", ["d", "k"], ["m"]),  # a per-channel constant in the epilogue
        helper.make_node("Conv", ["m", "w3"], ["y"]),
    ]
    weights = [("w0", rnd(c, 3, 3, 3)), ("w1", rnd(c, c, 3, 3)), ("b1", rnd(c)),
               ("w2", rnd(c, 1, 3, 3)), ("k", rnd(1, c, 1, 1)), ("w3", rnd(c, c, 1, 1)),
               ("w4", rnd(c, c, 3, 3)), ("w5", rnd(c, c, 3, 3))]  # fmt: skip
    return model(nodes, [("x", [1, 3, hw, hw])], ["y"], weights)


def _compiled(m: onnx.ModelProto, isa: str):
    g0 = import_onnx(m, {})
    g, _ = optimize(g0, "O2", target=table_for(isa))
    return g0, plan(g)


@pytest.mark.parametrize("isa", list(TARGETS))
def test_outputs_are_bit_identical_for_any_thread_count(isa, monkeypatch):
    """Every conv split (the cost rule's floor lowered), run on 1, 2 and 3 threads: the
    same bits each time, and equal to the numpy reference."""
    target = skip_unless_runnable(isa)
    monkeypatch.setattr(split, "MIN_TASK_FLOPS", 1)
    g0, compiled = _compiled(_net(32, 12), isa)
    # one native partition: a residual read at input 2 of a FusedConv without a bias is
    # an epilogue operand, not a run-time bias
    assert compiled.partition_report["count"] == 1, compiled.partition_text()
    x = np.random.default_rng(0).standard_normal((1, 3, 12, 12)).astype(np.float32)
    outs = []
    for threads in (1, 2, 3):
        rt, code = jit(compiled, target, threads=threads)
        steps = {s.node: s for s in code.plan.steps()}
        split_steps = [s for s in steps.values() if s.parts and "Conv" in s.op]
        # the stem (NCHW output), both convs of the block, the depthwise and the 1x1 conv;
        # not the conv whose epilogue reads its own input whole
        assert len(split_steps) == 5 and all(len(s.parts) >= 2 for s in split_steps)
        # the relayouts to and from the blocked layout split by channel blocks too
        relayouts = [s for s in steps.values() if s.op == "Relayout"]
        assert relayouts and all(len(s.parts) >= 2 for s in relayouts)
        assert not steps[next(n for n in steps if "b3" in n or n.endswith("_5"))].parts
        # channel blocks that do not divide into the tasks: bands of rows, unless the
        # epilogue reads a residual (then runs of channels)
        bands = [s for s in split_steps if "rows" in s.parts[0].attrs]
        assert bands and len(bands) < len(split_steps)
        for s in bands:
            rows = [t.attrs["rows"] for t in s.parts]
            assert rows[0][0] == 0 and all(
                a[1] == b[0] for a, b in zip(rows, rows[1:], strict=False)
            )
            assert rows[-1][1] == s.outputs[0].shape[2]
        outs.append(rt.run({"x": x})["y"])
    assert all(np.array_equal(outs[0], o) for o in outs[1:])
    ref = run_reference(g0, {"x": x})["y"]
    np.testing.assert_allclose(outs[0], ref, rtol=1e-4, atol=1e-4)


def test_the_cost_rule_keeps_small_convolutions_serial():
    _, compiled = _compiled(_net(16, 6), "avx512")
    _, code = jit(compiled, threads=2)
    assert not any(s.parts for s in code.plan.steps())  # each conv well under 2 MFLOP
    _, big = _compiled(_net(64, 28), "avx512")
    _, code = jit(big, threads=2)
    dense = [s for s in code.plan.steps() if s.parts]
    assert dense and all(2 <= len(s.parts) <= split.MAX_TASKS for s in dense)
    flops = [2 * 64 * 64 * 9 * 28 * 28]
    assert all(f // len(dense[0].parts) >= split.MIN_TASK_FLOPS for f in flops)


def _threads_of_this_process() -> int:
    return len(os.listdir("/proc/self/task"))


@pytest.mark.filterwarnings("ignore:threads. 3 is more than")
@pytest.mark.skipif(not Path("/proc/self/task").is_dir(), reason="needs Linux /proc")
def test_one_pool_per_loaded_artefact_not_per_call(tmp_path: Path):
    """A session with threads: 3 starts 2 workers at load; runs start none; dropping the
    session joins them."""
    import gc

    from guard.backends import get_backend
    from guard.backends.base import BuildRequest

    path = tmp_path / "net.onnx"
    onnx.save(_net(64, 28), path)
    out = tmp_path / "art"
    out.mkdir()
    be = get_backend("bundled")
    be.build(BuildRequest(path, {"x": (1, 3, 28, 28)}, "host", "host", 3, out))
    before = _threads_of_this_process()
    sess = be.load(out, threads=3)
    assert _threads_of_this_process() == before + 2
    x = np.random.default_rng(1).standard_normal((1, 3, 28, 28)).astype(np.float32)
    first = sess.run({"x": x})[0]
    for _ in range(3):
        assert np.array_equal(sess.run({"x": x})[0], first)
    assert _threads_of_this_process() == before + 2
    one = be.load(out, threads=1)
    assert np.array_equal(one.run({"x": x})[0], first)  # 1 thread: the same bits
    del sess, one
    gc.collect()
    assert _threads_of_this_process() == before


def _conv_step(k: int, c: int, hw: int, residual: bool = False) -> Step:
    """A 3x3 NCHW16c convolution step (no code: the split reads shapes only)."""
    op = lambda nm, sh: Operand(nm, "arena", 0, sh, "float32")  # noqa: E731
    x, y = op("x", (1, c // 16, hw, hw, 16)), op("y", (1, k // 16, hw, hw, 16))
    attrs: dict = {"layout": "NCHW16c", "group": 1, "strides": [1, 1], "dilations": [1, 1],
                   "pads": [1, 1, 1, 1]}  # fmt: skip
    ins = [x, Operand("w", "packed", 0, (k, c, 3, 3), "float32"), None]
    if residual:
        attrs |= {"anchor_inputs": 3, "program": [{"op": "Add", "args": ["acc", 3]}]}
        ins.append(op("r", y.shape))
    return Step("c", "FusedConv" if residual else "Conv", "", tuple(ins), (y,), attrs, False)


def test_conv_tasks_take_channels_when_they_divide_evenly_else_rows(monkeypatch):
    monkeypatch.setattr(split, "MIN_TASK_FLOPS", 2_000_000)  # the counts below at 2 MFLOP
    # 57.8 MFLOP: 8 tasks wanted (the most). 8 channel blocks: one each
    eight = split.conv_tasks(_conv_step(128, 32, 28), 16)
    assert len(eight) == 8 and all("rows" not in t.attrs for t in eight)
    assert [t.outputs[0].shape[1] for t in eight] == [1] * 8
    # 4 blocks: 8 bands of the 28 rows, every task all 64 channels (each thread's run of
    # the pool, 3, 4, 3, 4 rows, the same 14)
    four = split.conv_tasks(_conv_step(64, 64, 28), 16)
    assert [t.attrs["rows"] for t in four] == [(28 * i // 8, 28 * (i + 1) // 8) for i in range(8)]
    assert all(t.outputs == four[0].outputs and t.inputs[0].shape[1] == 4 for t in four)
    # an epilogue that reads a residual: runs of channels (the residual cut with them)
    res = split.conv_tasks(_conv_step(64, 64, 28, residual=True), 16)
    assert len(res) == 4 and all("rows" not in t.attrs for t in res)
    assert [t.inputs[3].shape[1] for t in res] == [1] * 4
    # 7.2 MFLOP wants 3 tasks, made even: 2, one per channel block
    two = split.conv_tasks(_conv_step(32, 16, 28), 16)
    assert len(two) == 2 and all("rows" not in t.attrs for t in two)
    assert split.conv_tasks(_conv_step(16, 16, 28), 16) == ()  # 3.6 MFLOP: serial


@pytest.mark.parametrize(
    "triple,hint", [("x86_64-unknown-linux-gnu", "pause"), ("aarch64-unknown-linux-gnu", "isb")]
)
def test_waiting_threads_spin_with_the_cpu_hint_before_sleeping(triple, hint):
    """Workers and the waiting caller poll with the architecture's spin hint, a bounded
    number of rounds, before they sleep on a condition variable."""
    import llvmlite.binding as llvm

    from guard.compiler.codegen import threadpool
    from guard.compiler.codegen.llvm_target import _init_llvm

    _init_llvm()
    mod = llvm.parse_assembly(f'target triple = "{triple}"\n' + threadpool.pool_ir(triple))
    mod.verify()
    tm = llvm.Target.from_triple(triple).create_target_machine(opt=2)
    asm = tm.emit_assembly(mod)
    for fn in ("gp_worker:", "guard_pool_run:"):  # the idle worker, the waiting caller
        body = asm[asm.index(fn) : asm.index(".Lfunc_end", asm.index(fn))]
        assert hint in body and "pthread_cond_wait" in body


@pytest.mark.skipif(not Path("/proc/self/task").is_dir(), reason="needs Linux /proc")
def test_an_idle_worker_sleeps_after_its_spin(tmp_path: Path):
    """After a run the worker polls for a bounded time (~25 us), then sleeps: over half a second
    idle it takes (almost) no CPU time."""
    import time

    from guard.backends import get_backend
    from guard.backends.base import BuildRequest

    path = tmp_path / "net.onnx"
    onnx.save(_net(64, 28), path)
    out = tmp_path / "art"
    out.mkdir()
    be = get_backend("bundled")
    be.build(BuildRequest(path, {"x": (1, 3, 28, 28)}, "host", "host", 2, out))
    before = set(os.listdir("/proc/self/task"))
    sess = be.load(out, threads=2)
    (worker,) = set(os.listdir("/proc/self/task")) - before
    x = np.random.default_rng(1).standard_normal((1, 3, 28, 28)).astype(np.float32)
    for _ in range(3):
        sess.run({"x": x})

    def cpu_s() -> float:
        fields = Path(f"/proc/self/task/{worker}/stat").read_text().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")

    time.sleep(0.05)
    c0 = cpu_s()
    time.sleep(0.5)
    assert cpu_s() - c0 < 0.1
    del sess
