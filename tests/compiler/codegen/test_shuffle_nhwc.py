"""A channel shuffle (Reshape -> Transpose -> Reshape) inside an NHWC region: assign_layout
re-lays its three nodes to the pixel's channel vector instead of ending the region in a
conversion to NCHW (and a blocked region before it), and the generated code equals the
reference interpreter and is bit-identical at 1, 2 and 3 threads on the host, x86-64-v3
and skylake-avx512."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import helper

from guard.compiler import import_onnx, optimize, run_reference
from guard.compiler.codegen.build import jit
from guard.compiler.codegen.llvm_target import host_target
from guard.compiler.ir.isa_table import table_for
from guard.compiler.ir.layout import count_conversions
from guard.compiler.partition.plan import plan

from ._jit import TARGETS
from .test_emitters import model, rnd
from .test_threads_bands import split_on_threads


def _unit(perm: tuple[int, ...] = (0, 2, 1, 3, 4)) -> onnx.ModelProto:
    """ShuffleNet's unit at 48 channels in 4 groups: grouped 1x1 + Relu, the shuffle,
    depthwise 3x3, grouped 1x1 + the residual, Relu."""
    inits = [("w0", rnd(48, 6, 1, 1, seed=1)), ("b0", rnd(48, seed=2)),
             ("wd", rnd(48, 1, 3, 3, seed=3)), ("bd", rnd(48, seed=4)),
             ("w1", rnd(48, 12, 1, 1, seed=5)), ("b1", rnd(48, seed=6))]  # fmt: skip
    split = [1, 4, 12, 10, 10] if perm[1] == 2 else [1, 48, 10, 2, 5]
    nodes = [
        helper.make_node("Conv", ["x", "w0", "b0"], ["a"], group=4),
        helper.make_node("Relu", ["a"], ["r"]),
        helper.make_node("Reshape", ["r", "s5"], ["r5"]),
        helper.make_node("Transpose", ["r5"], ["t5"], perm=list(perm)),
        helper.make_node("Reshape", ["t5", "s4"], ["sh"]),
        helper.make_node("Conv", ["sh", "wd", "bd"], ["d"], group=48, pads=[1, 1, 1, 1]),
        helper.make_node("Conv", ["d", "w1", "b1"], ["c"], group=4),
        helper.make_node("Add", ["c", "a"], ["s"]),
        helper.make_node("Relu", ["s"], ["y"]),
    ]
    inits += [("s5", np.array(split, np.int64)), ("s4", np.array([1, 48, 10, 10], np.int64))]
    return model(nodes, [("x", [1, 24, 10, 10])], ["y"], inits)


@pytest.mark.parametrize("isa", ["avx2", "avx512"])
def test_the_shuffle_runs_inside_one_nhwc_region(isa: str) -> None:
    """Without the rule the region is blocked (48 channels block by 8 and 16) and ends at
    the shuffle: a Relayout out, the NCHW shuffle, a Relayout back in (4 conversions)."""
    g0 = import_onnx(_unit(), {})
    g, report = optimize(g0, "O2", target=table_for(isa))
    assert count_conversions((n.op, n.attrs) for n in g.nodes) == 2
    convs = [n for n in g.nodes if n.op in ("Conv", "FusedConv")]
    assert len(convs) == 3 and {n.attrs["layout"] for n in convs} == {"NHWC"}
    (t,) = [n for n in g.nodes if n.op == "Transpose" and len(g.values[n.outputs[0]].shape) == 5]
    assert t.attrs["perm"] == [0, 1, 2, 4, 3]
    assert g.values[t.inputs[0]].shape == (1, 10, 10, 4, 12)
    x = rnd(1, 24, 10, 10, seed=9)
    np.testing.assert_allclose(
        run_reference(g, {"x": x})["y"], run_reference(g0, {"x": x})["y"], rtol=1e-5, atol=1e-5
    )


def test_a_reshape_transpose_that_is_no_channel_shuffle_ends_the_region() -> None:
    """Splitting the width, not the channels: left as it is, so the region around it needs
    four conversions and stays NCHW."""
    g0 = import_onnx(_unit(perm=(0, 1, 2, 4, 3)), {})
    g, report = optimize(g0, "O2", target=table_for("avx512"))
    (t,) = [n for n in g.nodes if n.op == "Transpose" and len(g.values[n.outputs[0]].shape) == 5]
    assert t.attrs["perm"] == [0, 1, 2, 4, 3] and g.values[t.inputs[0]].shape == (1, 48, 10, 2, 5)
    (notes,) = [p.notes for p in report.passes if p.name == "assign_layout"]
    assert any("do not pay for 4 conversions" in n for n in notes), notes
    x = rnd(1, 24, 10, 10, seed=9)
    np.testing.assert_allclose(
        run_reference(g, {"x": x})["y"], run_reference(g0, {"x": x})["y"], rtol=1e-5, atol=1e-5
    )


@pytest.mark.parametrize("isa", list(TARGETS))
def test_the_nhwc_shuffle_is_bit_identical_for_any_thread_count(isa, monkeypatch):
    for code in split_on_threads(_unit(), isa, monkeypatch):
        steps = code.plan.steps()
        assert [s.op for s in steps].count("Transpose") == 3  # in, the shuffle, out
        assert {s.attrs["layout"] for s in steps if "Conv" in s.op} == {"NHWC"}


def test_the_nhwc_shuffle_on_the_host() -> None:
    g0 = import_onnx(_unit(), {})
    target = host_target()
    g, _ = optimize(g0, "O2", target=target.table)
    assert count_conversions((n.op, n.attrs) for n in g.nodes) == 2
    compiled = plan(g)
    x = {"x": rnd(1, 24, 10, 10, seed=9)}
    outs = [jit(compiled, target, threads=t)[0].run(x)["y"] for t in (1, 2, 3)]
    assert all(np.array_equal(outs[0], o) for o in outs[1:])
    np.testing.assert_allclose(outs[0], run_reference(g0, x)["y"], rtol=1e-4, atol=1e-4)
