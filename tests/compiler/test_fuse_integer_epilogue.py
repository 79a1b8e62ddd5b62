"""fuse_integer_epilogue: an integer conv and the requantise chain that reads its int32
accumulator become one FusedConvInteger that writes the chain's bytes (no int32 tensor in
the arena). The structure, the graph before and after equal bit for bit in the reference
interpreter, the native code equal to the reference bit for bit on the host's class and
the two x86 classes at 1 and 2 threads (the 2-thread build the same code), over flat 1x1,
strided, grouped and padded geometries with row tails and u8, s8 and float32 outputs, the
arena without the accumulator, and the cases that must not fire."""

from __future__ import annotations

import numpy as np
import pytest
from onnx import TensorProto, helper, numpy_helper

from guard.compiler import import_onnx, optimize, run_reference
from guard.compiler.ir.isa_table import table_for
from guard.compiler.passes.base import PassResult
from guard.compiler.passes.fold_integer_conv import FoldIntegerConv
from guard.compiler.passes.fuse_elementwise import FuseElementwise
from guard.compiler.passes.fuse_integer_epilogue import FuseIntegerEpilogue
from guard.compiler.passes.lower_qdq import LowerQdq

from ._helpers import apply, ops
from .codegen._jit import TARGETS
from .test_fold_integer_conv_transpose import _jit_both

F = TensorProto.FLOAT
ISAS = ["host", *TARGETS]


def conv_model(tail: str = "relu", c: int = 8, k: int = 12, hw: tuple[int, int] = (9, 21),
               kernel: int = 3, stride: int = 1, group: int = 1, out: str = "u8"):  # fmt: skip
    """x -> Q -> DQ -> Conv(DQ(w) per channel, float bias) -> tail -> Q(out) [-> DQ] -> y.

    tail: "relu" (a per-channel Mul and Add, a BatchNormalization's, then Relu),
    "hardsigmoid", "none", "hardswish" (not fused: its code rounds otherwise), "twice"
    (Q -> DQ -> a per-channel Mul -> Relu before the last Q: the conv writes the first
    byte, a byte chain the rest).
    out: "u8", "s8", "f32" (Q then DQ)."""
    rng = np.random.default_rng(5)
    qt = np.int8 if out == "s8" else np.uint8
    sw = rng.uniform(0.002, 0.01, k).astype(np.float32)
    inits = [
        numpy_helper.from_array(np.float32(0.0371), "sx"),
        numpy_helper.from_array(np.uint8(121), "zx"),
        numpy_helper.from_array(
            rng.integers(-127, 128, (k, c // group, kernel, kernel)).astype(np.int8), "wq"
        ),  # fmt: skip
        numpy_helper.from_array(sw, "sw"),
        numpy_helper.from_array(np.zeros(k, np.int8), "zw"),
        numpy_helper.from_array(rng.uniform(-1, 1, k).astype(np.float32), "b"),
        numpy_helper.from_array(rng.uniform(0.5, 2, (1, k, 1, 1)).astype(np.float32), "g"),
        numpy_helper.from_array(rng.uniform(-1, 1, (1, k, 1, 1)).astype(np.float32), "beta"),
        numpy_helper.from_array(np.float32(0.0517), "sy"),
        numpy_helper.from_array(qt(-7 if out == "s8" else 97), "zy"),
    ]
    pad = kernel // 2
    nodes = [
        helper.make_node("QuantizeLinear", ["x", "sx", "zx"], ["xq"]),
        helper.make_node("DequantizeLinear", ["xq", "sx", "zx"], ["xd"]),
        helper.make_node("DequantizeLinear", ["wq", "sw", "zw"], ["wd"], axis=0),
        helper.make_node(
            "Conv", ["xd", "wd", "b"], ["a"], pads=[pad] * 4, strides=[stride, stride], group=group
        ),  # fmt: skip
    ]
    if tail == "relu":
        nodes += [helper.make_node("Mul", ["a", "g"], ["t0"]),
                  helper.make_node("Add", ["t0", "beta"], ["t1"]),
                  helper.make_node("Relu", ["t1"], ["t"])]  # fmt: skip
    elif tail in ("hardsigmoid", "hardswish"):
        nodes.append(helper.make_node(tail.replace("hard", "Hard").replace("sigmoid", "Sigmoid")
                                      .replace("swish", "Swish"), ["a"], ["t"]))  # fmt: skip
    elif tail == "sigmoid":  # after a Q -> DQ: its code approximates, it stays out
        nodes += [helper.make_node("QuantizeLinear", ["a", "sy", "zy"], ["aq"]),
                  helper.make_node("DequantizeLinear", ["aq", "sy", "zy"], ["ad"]),
                  helper.make_node("Sigmoid", ["ad"], ["t"])]  # fmt: skip
    elif tail == "twice":
        nodes += [helper.make_node("QuantizeLinear", ["a", "sy", "zy"], ["aq"]),
                  helper.make_node("DequantizeLinear", ["aq", "sy", "zy"], ["ad"]),
                  helper.make_node("Mul", ["ad", "g"], ["t0"]),
                  helper.make_node("Relu", ["t0"], ["t"])]  # fmt: skip
    else:
        nodes.append(helper.make_node("Identity", ["a"], ["t"]))
    nodes.append(helper.make_node("QuantizeLinear", ["t", "sy", "zy"], ["yq"]))
    y = "yq"
    if tail == "sigmoid":
        nodes.pop()  # the Sigmoid's float is the output
        y = "t"
    elif out == "f32":
        nodes.append(helper.make_node("DequantizeLinear", ["yq", "sy", "zy"], ["y"]))
        y = "y"
    g = helper.make_graph(
        nodes, "qconv", [helper.make_tensor_value_info("x", F, [1, c, *hw])],
        [helper.make_tensor_value_info(y, TensorProto.UNDEFINED, None)], inits,
    )  # fmt: skip
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 14)])


def _feeds(m, seed: int) -> dict[str, np.ndarray]:
    shape = [d.dim_value for d in m.graph.input[0].type.tensor_type.shape.dim]
    return {"x": (np.random.default_rng(seed).standard_normal(shape) * 2).astype(np.float32)}


def _before(m):
    """The graph fuse_integer_epilogue meets: ConvInteger, then one FusedElementwise."""
    g = import_onnx(m, {})
    for p in (FoldIntegerConv(), LowerQdq(), FuseElementwise()):
        g, _ = apply(p, g)
    return g


@pytest.mark.parametrize("tail,out", [("relu", "u8"), ("hardsigmoid", "u8"), ("none", "s8"),
                                      ("relu", "f32")])  # fmt: skip
def test_the_conv_writes_the_chain_and_the_reference_is_unchanged(tail, out):
    m = conv_model(tail, out=out)
    g0 = _before(m)
    assert "ConvInteger" in ops(g0)
    g, res = apply(FuseIntegerEpilogue(), g0)
    assert res.stats["num_fused"] == 1
    assert "ConvInteger" not in ops(g) and "FusedConvInteger" in ops(g)
    assert not any(v.dtype == np.int32 for v in g.values.values() if not g.is_constant(v.name))
    (node,) = [n for n in g.nodes if n.op == "FusedConvInteger"]
    assert node.attrs["program"][0] == {"op": "Cast", "args": ["acc"], "attrs": {"to": "f32"}}
    name = g.outputs[0]
    for seed in (0, 1, 2):  # the two nodes' references composed
        np.testing.assert_array_equal(
            run_reference(g0, _feeds(m, seed))[name], run_reference(g, _feeds(m, seed))[name]
        )


def test_a_second_requantisation_stays_a_byte_chain():
    """The conv runs the chain to its first byte; the steps after it (DQ, Mul, Relu, Q)
    read that byte in a FusedElementwise of their own (a byte table on VBMI)."""
    m = conv_model("twice")
    g0 = _before(m)
    g, res = apply(FuseIntegerEpilogue(), g0)
    assert res.stats["num_fused"] == 1
    i = ops(g).index("FusedConvInteger")
    conv, tail = g.nodes[i], g.nodes[i + 1]
    assert conv.attrs["program"][-1]["op"] == "Cast" and len(conv.attrs["program"]) < 10
    assert g.values[conv.outputs[0]].dtype == np.uint8
    assert tail.op == "FusedElementwise" and tail.inputs[0] == conv.outputs[0]
    assert tail.outputs == g0.nodes[-1].outputs
    name = g.outputs[0]
    for seed in (0, 1):
        np.testing.assert_array_equal(
            run_reference(g0, _feeds(m, seed))[name], run_reference(g, _feeds(m, seed))[name]
        )


def test_a_chain_that_cannot_join_whole_joins_up_to_its_first_byte():
    """A QuantizeLinear, DequantizeLinear and Sigmoid after the conv (PP-OCRv4 det's last
    ConvTranspose): the conv writes the byte, the Sigmoid chain reads it."""
    m = conv_model("sigmoid")
    g0 = _before(m)
    g, res = apply(FuseIntegerEpilogue(), g0)
    assert res.stats["num_fused"] == 1
    assert not any(v.dtype == np.int32 for v in g.values.values() if not g.is_constant(v.name))
    fused = next(n for n in g.nodes if n.op == "FusedConvInteger")
    assert g.values[fused.outputs[0]].dtype == np.uint8
    name = g.outputs[0]
    for seed in (0, 1):
        np.testing.assert_array_equal(
            run_reference(g0, _feeds(m, seed))[name], run_reference(g, _feeds(m, seed))[name]
        )


@pytest.mark.parametrize("isa", ISAS)
def test_the_sigmoid_chain_native_equals_the_unfused_build(isa, monkeypatch):
    """Sigmoid's code approximates the reference's, so the oracle is the build with the
    accumulator kept: the same bits, on each class at 1 and 2 threads."""
    m = conv_model("sigmoid", **GEOMETRIES["wide"])
    table = None if isa == "host" else table_for(isa)
    fused, _ = optimize(import_onnx(m, {}), "O2", target=table, verify_each=True)
    with monkeypatch.context() as mp:
        mp.setattr(FuseIntegerEpilogue, "run", lambda self, g: PassResult(False, {}, []))
        kept, _ = optimize(import_onnx(m, {}), "O2", target=table, verify_each=True)
    assert "FusedConvInteger" in ops(fused) and "ConvInteger" in ops(kept)
    name = fused.outputs[0]
    want = _jit_both(kept, isa)[0].run(_feeds(m, 0))[name]
    for rt in _jit_both(fused, isa)[:2]:
        np.testing.assert_array_equal(rt.run(_feeds(m, 0))[name], want)


@pytest.mark.parametrize("case", ["hardswish", "graph output"])
def test_a_chain_the_kernel_would_round_otherwise_or_a_seen_accumulator_stays(case):
    g0 = _before(conv_model("hardswish" if case == "hardswish" else "relu"))
    if case == "graph output":
        g0.outputs.append(next(n for n in g0.nodes if n.op == "ConvInteger").outputs[0])
    g, res = apply(FuseIntegerEpilogue(), g0)
    assert res.stats["num_fused"] == 0 and "ConvInteger" in ops(g)
    if case == "hardswish":
        assert any("HardSwish is not a float step" in n for n in res.notes)


def test_a_constant_that_varies_along_the_rows_stays():
    g0 = _before(conv_model("relu"))
    chain = next(n for n in g0.nodes if n.op == "FusedElementwise" and
                 any(g0.values[i].dtype == np.int32 for i in n.inputs))  # fmt: skip
    j = next(i for i, v in enumerate(chain.inputs) if g0.values[v].shape == (1, 12, 1, 1))
    chain.inputs[j] = g0.add_constant(None, np.ones((1, 12, 9, 1), np.float32), "rows").name
    g, res = apply(FuseIntegerEpilogue(), g0)
    assert res.stats["num_fused"] == 0
    assert any("varies along an axis other than the channels" in n for n in res.notes)


def _native_equal(m, isa: str) -> tuple[list[str], bool]:
    """One native partition with no int32 tensor between nodes, 1 and 2 threads (one
    build) equal to the reference bit for bit; the graph's ops and whether the fused conv
    split into tasks."""
    table = None if isa == "host" else table_for(isa)
    g, _ = optimize(import_onnx(m, {}), "O2", target=table, verify_each=True)
    assert not any(v.dtype == np.int32 for v in g.values.values() if not g.is_constant(v.name))
    rt1, rt2, code = _jit_both(g, isa)
    name = g.outputs[0]
    for seed in (0, 1):
        ref = run_reference(g, _feeds(m, seed))[name]
        np.testing.assert_array_equal(rt1.run(_feeds(m, seed))[name], ref)
        np.testing.assert_array_equal(rt2.run(_feeds(m, seed))[name], ref)
    split = any(s.parts for s in code.plan.steps() if s.op == "FusedConvInteger")
    return ops(g), split


GEOMETRIES = {
    "3x3": {},
    "1x1 flat": {"kernel": 1, "hw": (13, 19)},
    "stride 2": {"stride": 2, "hw": (17, 33)},
    "grouped": {"group": 4, "c": 8, "k": 8},
    "wide": {"c": 16, "k": 40, "hw": (48, 64)},  # row tasks; channel tiles with a tail
}


@pytest.mark.parametrize("isa", ISAS)
@pytest.mark.parametrize("geometry", list(GEOMETRIES))
@pytest.mark.parametrize(
    "tail,out", [("relu", "u8"), ("hardsigmoid", "s8"), ("none", "f32"), ("twice", "u8")]
)
def test_native_bit_identical(isa, geometry, tail, out):
    got, split = _native_equal(conv_model(tail, out=out, **GEOMETRIES[geometry]), isa)
    assert "FusedConvInteger" in got and "ConvInteger" not in got
    assert split == (geometry == "wide")  # row bands: each task requantises its rows
