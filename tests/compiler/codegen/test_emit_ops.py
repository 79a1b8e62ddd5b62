"""The emitters real models need beyond conv/GEMM/pooling (Resize, ConvTranspose, ...),
each against its reference kernel, for both x86 target classes (skipped where the host
cannot run one), and the attributes they do not cover declined with the reason."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from guard.compiler import import_onnx, optimize, run_reference
from guard.compiler.codegen.build import jit
from guard.compiler.ir.isa_table import table_for
from guard.compiler.partition.plan import plan

from ._jit import TARGETS, skip_unless_runnable
from .test_emitters import ATOL, RTOL, SCALE_ATOL, rnd

ISAS = list(TARGETS)


def graph_model(nodes, inputs, outputs, inits=(), opset=17, out_type=TensorProto.FLOAT):
    """A model whose inputs are (name, shape) float32 or (name, shape, onnx elem type)."""
    vis = [helper.make_tensor_value_info(i[0], i[2] if len(i) > 2 else TensorProto.FLOAT, i[1])
           for i in inputs]  # fmt: skip
    g = helper.make_graph(
        nodes,
        "t",
        vis,
        [helper.make_tensor_value_info(n, out_type, None) for n in outputs],
        [numpy_helper.from_array(v, k) for k, v in inits],
    )
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", opset)])


def feeds_for(g, seed: int) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(seed)
    out = {}
    for k in g.inputs:
        v = g.values[k]
        if v.dtype == "float32":
            out[k] = rng.standard_normal(v.shape).astype(np.float32)
        elif v.dtype == "bool":
            out[k] = rng.integers(0, 2, v.shape).astype(bool)
        else:
            out[k] = rng.integers(-5, 6, v.shape).astype(v.dtype)
    return out


def check(m: onnx.ModelProto, isa: str, pipeline: str = "O0", seeds=(0,), feeds=None):
    """Compile ``m`` for ``isa`` (one native partition, asserted) and compare every output
    with the reference interpreter: floats within the emitters' tolerance, the rest exact."""
    target = skip_unless_runnable(isa)
    g0 = import_onnx(m, {})
    g, _ = optimize(g0, pipeline, target=table_for(isa))
    compiled = plan(g)
    rep = compiled.partition_report
    assert rep["fallback_nodes"] == 0, dict(compiled.partitions.declines)
    rt, code = jit(compiled, target)
    for seed in seeds:
        f = feeds or feeds_for(g0, seed)
        ref = run_reference(g0, f)
        out = rt.run(f)
        for k in ref:
            assert out[k].dtype == ref[k].dtype and out[k].shape == ref[k].shape, k
            if ref[k].dtype.kind == "f":
                atol = max(ATOL, SCALE_ATOL * float(np.abs(ref[k]).max(initial=0.0)))
                np.testing.assert_allclose(out[k], ref[k], rtol=RTOL, atol=atol, err_msg=k)
            else:
                np.testing.assert_array_equal(out[k], ref[k], err_msg=k)
    return compiled, code


def declines(m: onnx.ModelProto) -> list[str]:
    g, _ = optimize(import_onnx(m, {}), "O0")
    compiled = plan(g)
    return [w["native"] for w in compiled.partitions.declines.values() if "native" in w]


# -- Resize -------------------------------------------------------------------------------

RESIZE_CASES = [
    # (mode, coordinate_transformation_mode, nearest_mode, scales or None, sizes or None)
    ("nearest", "asymmetric", "floor", [1, 1, 2, 2], None),
    ("nearest", "half_pixel", "round_prefer_floor", [1, 1, 1.7, 0.6], None),
    ("nearest", "align_corners", "round_prefer_ceil", None, [1, 3, 9, 4]),
    ("nearest", "tf_half_pixel_for_nn", "ceil", [1, 1, 3, 2], None),
    ("linear", "half_pixel", "", [1, 1, 2, 2], None),
    ("linear", "align_corners", "", None, [1, 3, 11, 7]),
    ("linear", "asymmetric", "", [1, 1, 0.5, 1.5], None),
    ("linear", "pytorch_half_pixel", "", None, [1, 3, 1, 13]),
    ("linear", "half_pixel_symmetric", "", [1, 1, 2.5, 1.25], None),
    ("cubic", "half_pixel", "", [1, 1, 2, 2], None),
]


@pytest.mark.parametrize("isa", ISAS)
@pytest.mark.parametrize("case", RESIZE_CASES, ids=lambda c: f"{c[0]}-{c[1]}")
def test_resize(case, isa):
    mode, ctm, nearest, scales, sizes = case
    attrs = {"mode": mode, "coordinate_transformation_mode": ctm}
    if nearest:
        attrs["nearest_mode"] = nearest
    inits = [("roi", np.zeros(0, np.float32))]
    if scales:
        inits.append(("scales", np.array(scales, np.float32)))
        ins = ["x", "roi", "scales"]
    else:
        inits.append(("sizes", np.array(sizes, np.int64)))
        ins = ["x", "roi", "", "sizes"]
    node = helper.make_node("Resize", ins, ["y"], **attrs)
    check(graph_model([node], [("x", [1, 3, 6, 5])], ["y"], inits), isa)


@pytest.mark.parametrize("isa", ISAS)
def test_resize_nearest_moves_integers_and_upsample(isa):
    nodes = [
        helper.make_node("Resize", ["i", "", "s"], ["yi"], mode="nearest"),
        helper.make_node("Upsample", ["x", "s"], ["y"], mode="linear"),
    ]
    inits = [("s", np.array([1, 2, 3], np.float32))]
    m = graph_model(nodes, [("i", [2, 3, 4], TensorProto.INT64), ("x", [2, 3, 4])], ["yi", "y"],
                    inits)  # fmt: skip
    m.graph.output[0].type.tensor_type.elem_type = TensorProto.INT64
    check(m, isa)


def test_resize_declines_what_it_does_not_cover():
    node = helper.make_node(
        "Resize", ["x", "roi", "s"], ["y"], mode="linear",
        coordinate_transformation_mode="tf_crop_and_resize",
    )  # fmt: skip
    inits = [("roi", np.array([0, 0, 0.1, 0.2, 1, 1, 0.9, 0.7], np.float32)),
             ("s", np.array([1, 1, 2, 2], np.float32))]  # fmt: skip
    got = declines(graph_model([node], [("x", [1, 2, 5, 5])], ["y"], inits))
    assert got == ["no emitter for Resize with coordinate_transformation_mode tf_crop_and_resize"]


# -- ConvTranspose -------------------------------------------------------------------------

CONVT_CASES = [
    # (C, K, H, W, kernel, attrs)
    (4, 6, 5, 7, [2, 2], {"strides": [2, 2]}),
    (8, 19, 4, 6, [3, 3], {"strides": [2, 2], "pads": [1, 1, 1, 1], "output_padding": [1, 1]}),
    (3, 5, 6, 5, [3, 2], {"dilations": [2, 1], "pads": [0, 1, 2, 0]}),
    (6, 4, 5, 5, [3, 3], {"group": 2, "strides": [3, 2]}),
    (4, 4, 7, 1, [4], {"strides": [2], "pads": [1, 1]}),  # 1-D: H is the length
    (5, 3, 4, 4, [3, 3], {"output_shape": [9, 11], "strides": [2, 2]}),  # negative pads
]


@pytest.mark.parametrize("isa", ISAS)
@pytest.mark.parametrize("case", CONVT_CASES, ids=range(len(CONVT_CASES)))
def test_conv_transpose(case, isa):
    c, k, h, w, ks, attrs = case
    g = attrs.get("group", 1)
    one_d = len(ks) == 1
    xshape = [2, c, h] if one_d else [1, c, h, w]
    inits = [("w", rnd(c, k // g, *ks)), ("b", rnd(k, seed=5))]
    node = helper.make_node("ConvTranspose", ["x", "w", "b"], ["y"], **attrs)
    check(graph_model([node], [("x", xshape)], ["y"], inits), isa, "O2")


def test_conv_transpose_declines_run_time_weights():
    node = helper.make_node("ConvTranspose", ["x", "w"], ["y"])
    m = graph_model([node], [("x", [1, 2, 3, 3]), ("w", [2, 2, 2, 2])], ["y"])
    assert declines(m) == ["no emitter for ConvTranspose with run-time weights"]


# -- integers, bool, Cast, comparisons and Where --------------------------------------------

I32, I64, U8, BOOL = TensorProto.INT32, TensorProto.INT64, TensorProto.UINT8, TensorProto.BOOL


@pytest.mark.parametrize("isa", ISAS)
@pytest.mark.parametrize("op", ["Add", "Sub", "Mul", "Div", "Max", "Min", "Mod"])
@pytest.mark.parametrize("elem", [I32, I64, U8])
def test_integer_arithmetic_broadcasting(op, elem, isa):
    """Division and Mod by zero and by -1 included (the feeds draw from -5..5)."""
    attrs = {"fmod": 1} if op == "Mod" and elem == I32 else {}
    node = helper.make_node(op, ["x", "z"], ["y"], **attrs)
    m = graph_model([node], [("x", [3, 1, 9], elem), ("z", [4, 9], elem)], ["y"], out_type=elem)
    check(m, isa, seeds=(0, 1))


@pytest.mark.parametrize("isa", ISAS)
def test_comparisons_logic_where_and_cast(isa):
    nodes = [
        helper.make_node("Less", ["a", "b"], ["lt"]),
        helper.make_node("GreaterOrEqual", ["i", "j"], ["ge"]),
        helper.make_node("Equal", ["i", "j"], ["eq"]),
        helper.make_node("Or", ["lt", "ge"], ["o"]),
        helper.make_node("Not", ["eq"], ["ne"]),
        helper.make_node("Xor", ["o", "ne"], ["c"]),
        helper.make_node("Where", ["c", "a", "b"], ["w"]),
        helper.make_node("Cast", ["w"], ["wi"], to=I64),
        helper.make_node("Cast", ["i"], ["fi"], to=TensorProto.FLOAT),
        helper.make_node("Cast", ["c"], ["cf"], to=TensorProto.FLOAT),
        helper.make_node("Cast", ["a"], ["ab"], to=BOOL),
        helper.make_node("Neg", ["i"], ["ni"]),
        helper.make_node("Abs", ["ni"], ["ai"]),
    ]
    ins = [("a", [2, 5]), ("b", [5]), ("i", [2, 5], I32), ("j", [2, 1], I32)]
    outs = ["w", "wi", "fi", "cf", "ab", "ai"]
    m = graph_model(nodes, ins, outs)
    for o, elem in zip(m.graph.output, [1, I64, 1, 1, BOOL, I32], strict=True):
        o.type.tensor_type.elem_type = elem
    compiled, code = check(m, isa, "O2", seeds=(0, 1))
    assert compiled.partition_report["count"] == 1


@pytest.mark.parametrize("isa", ISAS)
def test_one_hot_as_equal_then_cast_fuses_with_float_math(isa):
    """The byte-classifier's pattern: Equal of int32 tensors, Cast to float, then math."""
    nodes = [
        helper.make_node("Equal", ["i", "r"], ["e"]),
        helper.make_node("Cast", ["e"], ["f"], to=TensorProto.FLOAT),
        helper.make_node("Mul", ["f", "x"], ["m"]),
        helper.make_node("Tanh", ["m"], ["y"]),
    ]
    inits = [("r", np.arange(-5, 6, dtype=np.int32).reshape(1, 1, 11))]
    m = graph_model(nodes, [("i", [1, 7, 1], I32), ("x", [1, 7, 11])], ["y"], inits)
    _, code = check(m, isa, "O2")
    assert [s.op for s in code.plan.steps()] == ["FusedElementwise"]


@pytest.mark.parametrize("isa", ISAS)
def test_pow(isa):
    """Exact for the exponents models use, and exp(y log|x|) with the sign rules else."""
    ys = np.array([2, 0.5, 3, -1, 0, 1, 1.7, -2, 4], np.float32).reshape(9, 1)
    x = np.concatenate([np.abs(rnd(1, 6)) + 0.1, -np.abs(rnd(1, 3, seed=4)) - 0.1], axis=1)
    node = helper.make_node("Pow", ["x", "e"], ["y"])
    m = graph_model([node], [("x", [1, 9])], ["y"], [("e", ys)])
    check(m, isa, feeds={"x": x.astype(np.float32)})


@pytest.mark.parametrize("isa", ISAS)
def test_expand_and_tile(isa):
    nodes = [
        helper.make_node("Expand", ["x", "s"], ["e"]),
        helper.make_node("Tile", ["x", "r"], ["t"]),
        helper.make_node("Tile", ["i", "r"], ["ti"]),
    ]
    inits = [("s", np.array([2, 3, 4, 5], np.int64)), ("r", np.array([2, 1, 3], np.int64))]
    m = graph_model(nodes, [("x", [3, 1, 5]), ("i", [2, 3, 1], I64)], ["e", "t", "ti"], inits)
    m.graph.output[2].type.tensor_type.elem_type = I64
    check(m, isa)


@pytest.mark.parametrize("isa", ISAS)
def test_one_dimensional_pooling(isa):
    nodes = [
        helper.make_node("GlobalMaxPool", ["x"], ["g"]),
        helper.make_node("MaxPool", ["x"], ["p"], kernel_shape=[3], strides=[2], pads=[1, 1]),
        helper.make_node("AveragePool", ["x"], ["a"], kernel_shape=[4], pads=[0, 2]),
    ]
    check(graph_model(nodes, [("x", [2, 5, 13])], ["g", "p", "a"]), isa)


def test_typed_elementwise_declines_what_it_does_not_cover():
    mod = graph_model([helper.make_node("Mod", ["x", "z"], ["y"], fmod=1)],
                      [("x", [3]), ("z", [3])], ["y"])  # fmt: skip
    assert declines(mod) == ["no emitter for Mod on float32, float32"]
    ipow = graph_model([helper.make_node("Pow", ["x", "z"], ["y"])],
                       [("x", [3], I32), ("z", [3], I32)], ["y"], out_type=I32)  # fmt: skip
    assert declines(ipow) == ["no emitter for Pow on integers"]


# -- Pad modes, Gather, GatherElements, 1-D convolution ------------------------------------


@pytest.mark.parametrize("isa", ISAS)
@pytest.mark.parametrize("mode", ["reflect", "edge", "wrap"])
def test_pad_modes(mode, isa):
    node = helper.make_node("Pad", ["x", "p"], ["y"], mode=mode)
    pads = np.array([0, 2, 0, 3, 0, 1, 1, 2], np.int64)  # a crop (-) on the last axis too
    if mode != "wrap":
        pads[-1] = -1
    check(graph_model([node], [("x", [2, 3, 5, 6])], ["y"], [("p", pads)]), isa)


@pytest.mark.parametrize("isa", ISAS)
def test_gather_and_gather_elements(isa):
    nodes = [
        helper.make_node("Gather", ["x", "i"], ["g0"], axis=1),
        helper.make_node("Gather", ["x", "s"], ["g1"], axis=0),
        helper.make_node("Gather", ["n", "i"], ["g2"], axis=-1),
        helper.make_node("GatherElements", ["x", "e"], ["ge"], axis=2),
    ]
    inits = [
        ("i", np.array([[0, -1, 2], [3, 1, 1]], np.int64)),
        ("s", np.array(1, np.int32)),
        ("e", np.random.default_rng(2).integers(-4, 4, (2, 4, 3)).astype(np.int32)),
    ]
    m = graph_model(nodes, [("x", [2, 4, 4]), ("n", [3, 5], I32)], ["g0", "g1", "g2", "ge"], inits)
    m.graph.output[2].type.tensor_type.elem_type = I32
    check(m, isa)


@pytest.mark.parametrize("isa", ISAS)
def test_one_dimensional_convolution_runs_as_a_two_dimensional_one(isa):
    """A voice model's front end: strided 1-D convs with a bias and a Relu."""
    nodes = [
        helper.make_node("Conv", ["x", "w0", "b0"], ["c0"], strides=[4], pads=[2, 1]),
        helper.make_node("Relu", ["c0"], ["r"]),
        helper.make_node("Conv", ["r", "w1"], ["y"], dilations=[2], group=2),
    ]
    inits = [("w0", rnd(8, 3, 5)), ("b0", rnd(8)), ("w1", rnd(6, 4, 3))]
    compiled, _ = check(graph_model(nodes, [("x", [1, 3, 61])], ["y"], inits), isa, "O2")
    convs = [n for n in compiled.graph.nodes if "Conv" in n.op]
    assert len(convs) == 2 and all(
        len(compiled.graph.values[n.inputs[1]].shape) == 4 for n in convs
    )


# -- reductions, ArgMax/ArgMin, TopK, Einsum --------------------------------------------------


@pytest.mark.parametrize("isa", ISAS)
@pytest.mark.parametrize("op", ["ReduceProd", "ReduceLogSum", "ReduceLogSumExp", "ReduceMax"])
@pytest.mark.parametrize("axes", [[1], [0, 2], None])  # None: every axis
def test_reductions_on_any_axes(op, axes, isa):
    inits = [("ax", np.array(axes, np.int64))] if axes else []
    node = helper.make_node(op, ["x", "ax"] if axes else ["x"], ["y"], keepdims=0)
    m = graph_model([node], [("x", [3, 5, 4])], ["y"], inits, opset=18)
    x = np.random.default_rng(1).uniform(0.5, 1.5, (3, 5, 4)).astype(np.float32)
    check(m, isa, feeds={"x": x})


@pytest.mark.parametrize("isa", ISAS)
def test_argmax_argmin_ties_and_nan(isa):
    nodes = [
        helper.make_node("ArgMax", ["x"], ["a0"], axis=1),
        helper.make_node("ArgMin", ["x"], ["a1"], axis=2, keepdims=0),
        helper.make_node("ArgMax", ["x"], ["a2"], axis=1, select_last_index=1),
        helper.make_node("ArgMin", ["x"], ["a3"], axis=0, select_last_index=1),
    ]
    m = graph_model(nodes, [("x", [3, 6, 5])], ["a0", "a1", "a2", "a3"], out_type=I64)
    x = np.round(np.random.default_rng(3).standard_normal((3, 6, 5)), 0).astype(np.float32)
    x[1, 2, 3] = x[2, 4, 1] = np.nan  # ties from the rounding; NaN wins where it is
    check(m, isa, feeds={"x": x})


@pytest.mark.parametrize("isa", ISAS)
@pytest.mark.parametrize("largest", [1, 0])
def test_topk(largest, isa):
    nodes = [
        helper.make_node("TopK", ["x", "k"], ["v", "i"], axis=1, largest=largest),
        helper.make_node("TopK", ["x", "k1"], ["v1", "i1"], axis=-1, largest=largest),
    ]
    inits = [("k", np.array([4], np.int64)), ("k1", np.array([1], np.int64))]
    m = graph_model(nodes, [("x", [2, 9, 3])], ["v", "i", "v1", "i1"], inits)
    for o in (m.graph.output[1], m.graph.output[3]):
        o.type.tensor_type.elem_type = I64
    x = np.round(np.random.default_rng(5).standard_normal((2, 9, 3)), 0).astype(np.float32)
    x[0, 3, 1] = np.nan
    check(m, isa, feeds={"x": x})


@pytest.mark.parametrize("isa", ISAS)
@pytest.mark.parametrize(
    "eq,shapes",
    [
        ("bij,bjk->bik", [[2, 3, 4], [2, 4, 5]]),
        ("ij,kj", [[3, 4], [5, 4]]),  # implicit output: ik
        ("ii->i", [[4, 4]]),
        ("bhqd,bhkd->bhqk", [[1, 2, 3, 4], [1, 2, 5, 4]]),
        ("i,i->", [[7], [7]]),
    ],
)
def test_einsum(eq, shapes, isa):
    names = [f"x{i}" for i in range(len(shapes))]
    node = helper.make_node("Einsum", names, ["y"], equation=eq)
    check(graph_model([node], list(zip(names, shapes, strict=True)), ["y"]), isa)


def test_einsum_declines_an_ellipsis():
    node = helper.make_node("Einsum", ["a", "b"], ["y"], equation="...ij,...jk->...ik")
    m = graph_model([node], [("a", [2, 3, 4]), ("b", [2, 4, 5])], ["y"])
    assert declines(m) == ["no emitter for Einsum with an ellipsis"]


# -- LSTM ---------------------------------------------------------------------------------

LSTM_CASES = [
    # (direction, attrs, with bias, sequence_lens 4 and 0, initial state and peepholes)
    ("forward", {}, False),
    ("reverse", {"clip": 0.7}, True),
    ("bidirectional", {"input_forget": 1}, True),
]


@pytest.mark.parametrize("isa", ISAS)
@pytest.mark.parametrize("case", LSTM_CASES, ids=[c[0] for c in LSTM_CASES])
def test_lstm(case, isa):
    direction, attrs, extras = case
    d, h, i, seq, batch = (2 if direction == "bidirectional" else 1), 5, 3, 4, 2
    inits = [("w", rnd(d, 4 * h, i)), ("r", rnd(d, 4 * h, h, seed=4))]
    ins = ["x", "w", "r"]
    if extras:
        inits += [("b", rnd(d, 8 * h, seed=5)), ("n", np.array([seq, 0], np.int32)),
                  ("h0", rnd(d, batch, h, seed=6)), ("c0", rnd(d, batch, h, seed=7)),
                  ("p", rnd(d, 3 * h, seed=8))]  # fmt: skip
        ins += ["b", "n", "h0", "c0", "p"]
    node = helper.make_node(
        "LSTM", ins, ["y", "yh", "yc"], hidden_size=h, direction=direction, **attrs
    )
    check(graph_model([node], [("x", [seq, batch, i])], ["y", "yh", "yc"], inits), isa)


def test_lstm_declines_batch_first_before_o2():
    node = helper.make_node("LSTM", ["x", "w", "r"], ["y"], hidden_size=2, layout=1)
    inits = [("w", rnd(1, 8, 3)), ("r", rnd(1, 8, 2))]
    m = graph_model([node], [("x", [2, 2, 3])], ["y"], inits)
    assert declines(m) == ["no emitter for LSTM with layout=1 (O2 makes it sequence first)"]


@pytest.mark.parametrize("isa", ISAS)
@pytest.mark.parametrize(
    "op,attrs",
    [("Sign", {}), ("Round", {}), ("Softplus", {}), ("Mish", {}),
     ("ThresholdedRelu", {"alpha": 0.3}), ("Celu", {"alpha": 0.7}),
     ("Shrink", {"lambd": 0.4, "bias": 0.1})],
)  # fmt: skip
def test_more_float_unary(op, attrs, isa):
    x = np.concatenate(
        [rnd(1, 29) * 10, np.array([[0.0, 0.5, -0.5, 1.5, 2.5, 30.0, -30.0]])], axis=1
    )
    m = graph_model([helper.make_node(op, ["x"], ["y"], **attrs)], [("x", [1, 36])], ["y"])
    check(m, isa, feeds={"x": x.astype(np.float32)})
