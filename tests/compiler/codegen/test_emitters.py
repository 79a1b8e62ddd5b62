"""Each emitter against its reference kernel (the oracle), over shapes that hit every tail
and edge: odd channels, widths that are not a multiple of the vector width, stride 2,
pads, dilation, 1x1, depthwise, groups, batch > 1, blocked layouts (O2) and NCHW (O0)."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from guard.compiler import import_onnx, optimize, run_reference
from guard.compiler.codegen.build import jit
from guard.compiler.partition.plan import plan

from ._jit import TARGETS, skip_unless_runnable

RTOL, ATOL = 1e-4, 1e-5
# An element that cancels out of large terms carries the rounding of those terms, not of
# itself: a float32 sum of K products is off by up to ~K eps of the terms' size, whatever
# order either side adds in (the vector width decides the order: AVX2 and AVX-512 differ).
# So the absolute tolerance also follows the output's scale, 8 eps of its largest value.
SCALE_ATOL = 1e-6


def model(nodes, inputs, outputs, inits=(), opset=17):
    g = helper.make_graph(
        nodes,
        "t",
        [helper.make_tensor_value_info(n, TensorProto.FLOAT, s) for n, s in inputs],
        [helper.make_tensor_value_info(n, TensorProto.FLOAT, None) for n in outputs],
        [numpy_helper.from_array(v, k) for k, v in inits],
    )
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", opset)])


def run_both(m: onnx.ModelProto, pipeline: str = "O2", seeds=(0, 1)):
    g, _ = optimize(import_onnx(m, {}), pipeline)
    compiled = plan(g)
    rep = compiled.partition_report
    assert rep["fallback_nodes"] == 0, compiled.partitions.declines
    rt, code = jit(compiled)
    for seed in seeds:
        rng = np.random.default_rng(seed)
        feeds = {k: rng.standard_normal(g.values[k].shape).astype(np.float32) for k in g.inputs}
        ref = run_reference(g, feeds)
        out = rt.run(feeds)
        for k in ref:
            atol = max(ATOL, SCALE_ATOL * float(np.abs(ref[k]).max(initial=0.0)))
            np.testing.assert_allclose(out[k], ref[k], rtol=RTOL, atol=atol, err_msg=k)
    return g, code


def rnd(*shape, seed=3):
    return (np.random.default_rng(seed).standard_normal(shape) * 0.3).astype(np.float32)


# -- elementwise ------------------------------------------------------------------------

UNARY = ["Relu", "Sigmoid", "Tanh", "Exp", "Neg", "Abs", "Erf", "Softsign", "Elu", "HardSigmoid",
         "HardSwish", "Floor", "Ceil", "Identity"]  # fmt: skip


@pytest.mark.parametrize("op", UNARY)
@pytest.mark.parametrize("shape", [[1], [37], [3, 17, 5]])
def test_unary(op, shape):
    run_both(model([helper.make_node(op, ["x"], ["y"])], [("x", shape)], ["y"]), "O0", seeds=(0,))


@pytest.mark.parametrize(
    "a,b",
    [([3, 37], [37]), ([2, 1, 5], [3, 1]), ([4, 16, 7], [1, 16, 1]), ([5], [1]), ([1, 33], [2, 1])],
)
@pytest.mark.parametrize("op", ["Add", "Sub", "Mul", "Div", "Max", "Min"])
def test_binary_broadcasting(a, b, op):
    run_both(
        model([helper.make_node(op, ["x", "z"], ["y"])], [("x", a), ("z", b)], ["y"]),
        "O0",
        seeds=(0,),
    )


def test_fused_chain_is_one_loop():
    nodes = [
        helper.make_node("Mul", ["x", "z"], ["a"]),
        helper.make_node("Add", ["a", "x"], ["b"]),
        helper.make_node("Tanh", ["b"], ["c"]),
        helper.make_node("Sigmoid", ["c"], ["y"]),
    ]
    g, code = run_both(model(nodes, [("x", [2, 45]), ("z", [45])], ["y"]))
    assert [s.op for s in code.plan.steps()] == ["FusedElementwise"]
    assert "<16 x float>" in code.generated.ir_text or "<8 x float>" in code.generated.ir_text


def test_math_error_bounds_as_documented():
    """exp/tanh/sigmoid/erf/log against float64 numpy at the bounds mathfn.py states."""
    import math

    x = np.concatenate([np.linspace(-87, 88, 20001), np.linspace(-3, 3, 20001)]).astype(np.float32)
    xp = np.abs(x) + np.float32(1e-30)
    x64 = x.astype(np.float64)
    cases = {
        "Exp": (x, np.exp(x64), "rel", 2e-7 * 4),
        "Tanh": (x, np.tanh(x64), "abs", 3e-7 * 2),
        "Sigmoid": (x, 1 / (1 + np.exp(-x64)), "abs", 4e-7),
        "Erf": (x, np.array([math.erf(v) for v in x64]), "abs", 5e-7),
        "Log": (xp, np.log(xp.astype(np.float64)), "abs", 5e-7),
    }
    for op, (inp, want, kind, bound) in cases.items():
        m = model([helper.make_node(op, ["x"], ["y"])], [("x", list(inp.shape))], ["y"])
        g, _ = optimize(import_onnx(m, {}), "O0")
        rt, _ = jit(plan(g))
        got = rt.run({"x": inp})["y"].astype(np.float64)
        err = np.abs(got - want)
        if kind == "rel":
            err = err / np.maximum(np.abs(want), 1e-30)
        assert float(err.max()) <= bound, (op, float(err.max()))


# -- gemm / matmul ------------------------------------------------------------------------


@pytest.mark.parametrize("m,k,n", [(1, 64, 10), (3, 17, 33), (128, 256, 100), (7, 5, 16)])
@pytest.mark.parametrize("trans_b", [0, 1])
def test_gemm_bias_relu(m, k, n, trans_b):
    w = rnd(n, k) if trans_b else rnd(k, n)
    nodes = [
        helper.make_node("Gemm", ["x", "w", "b"], ["g"], transB=trans_b),
        helper.make_node("Relu", ["g"], ["y"]),
    ]
    run_both(model(nodes, [("x", [m, k])], ["y"], [("w", w), ("b", rnd(n, seed=4))]))


@pytest.mark.parametrize(
    "a,b", [([2, 3, 8, 16], [2, 3, 16, 5]), ([4, 7, 9], [9, 20]), ([1, 33, 64], [64, 48])]
)
def test_matmul_batched_and_folded(a, b):
    run_both(model([helper.make_node("MatMul", ["x", "z"], ["y"])], [("x", a), ("z", b)], ["y"]))


def test_fused_matmul_with_a_residual_reads_the_other_tensor():
    nodes = [
        helper.make_node("MatMul", ["x", "w"], ["a"]),
        helper.make_node("Add", ["a", "b"], ["c"]),
        helper.make_node("Add", ["c", "x"], ["y"]),
    ]
    run_both(model(nodes, [("x", [5, 24])], ["y"], [("w", rnd(24, 24)), ("b", rnd(24, seed=5))]))


def test_matmul_broadcasting_batch_is_declined_by_name():
    m = model(
        [helper.make_node("MatMul", ["x", "z"], ["y"])], [("x", [2, 3, 4]), ("z", [1, 4, 5])], ["y"]
    )
    g, _ = optimize(import_onnx(m, {}), "O0")
    c = plan(g)
    assert c.partition_report["fallback_nodes"] == 1
    assert (
        "no emitter for MatMul broadcasting" in next(iter(c.partitions.declines.values()))["native"]
    )


# -- convolution ----------------------------------------------------------------------------

CONVS = [
    # (N, C, H, W, K, R, S, stride, pad, dilation, group)
    (1, 3, 15, 13, 8, 3, 3, 1, 1, 1, 1),  # odd channels, odd sizes
    (2, 5, 9, 11, 7, 3, 3, 2, 1, 1, 1),  # batch 2, stride 2, K not a multiple of W
    (1, 16, 10, 19, 32, 1, 1, 1, 0, 1, 1),  # 1x1, blocked (O2)
    (1, 32, 14, 14, 32, 3, 3, 1, 1, 1, 32),  # depthwise, blocked
    (1, 32, 9, 9, 32, 3, 3, 2, 1, 1, 32),  # depthwise stride 2
    (1, 16, 12, 12, 48, 3, 3, 1, 2, 2, 1),  # dilation 2
    (1, 32, 8, 8, 64, 3, 3, 1, 1, 1, 2),  # groups, 32 output channels per group
    (1, 12, 7, 7, 12, 3, 3, 1, 1, 1, 4),  # groups, 3 channels per group (grouped, masked)
    (1, 272, 6, 6, 272, 1, 1, 1, 0, 1, 4),  # shufflenet's: 68 per group, vectors straddle blocks
    (1, 48, 6, 9, 24, 3, 3, 2, 1, 1, 4),  # 12 in / 6 out per group, stride 2
    (1, 16, 7, 7, 16, 7, 7, 1, 3, 1, 1),  # a kernel as wide as the image: no interior
    (1, 3, 32, 32, 16, 7, 7, 2, 3, 1, 1),  # resnet's stem
    (1, 16, 8, 8, 16, 3, 3, 1, (0, 1, 2, 0), 1, 1),  # asymmetric pads
]


@pytest.mark.parametrize("pipeline", ["O0", "O2"])
@pytest.mark.parametrize("case", CONVS, ids=lambda c: "x".join(map(str, c)))
def test_conv(case, pipeline):
    n, c, h, w, k, r, s, st, pad, dil, grp = case
    pads = list(pad) if isinstance(pad, tuple) else [pad] * 4
    nodes = [
        helper.make_node(
            "Conv",
            ["x", "w", "b"],
            ["a"],
            strides=[st, st],
            pads=pads,
            dilations=[dil, dil],
            group=grp,
        ),
        helper.make_node("Relu", ["a"], ["y"]),
    ]
    inits = [("w", rnd(k, c // grp, r, s)), ("b", rnd(k, seed=6))]
    run_both(model(nodes, [("x", [n, c, h, w])], ["y"], inits), pipeline, seeds=(0,))


def test_conv_with_a_residual_epilogue():
    nodes = [
        helper.make_node("Conv", ["x", "w"], ["a"], pads=[1, 1, 1, 1]),
        helper.make_node("Add", ["a", "x"], ["b"]),
        helper.make_node("Relu", ["b"], ["y"]),
    ]
    run_both(model(nodes, [("x", [1, 16, 9, 9])], ["y"], [("w", rnd(16, 16, 3, 3))]))


# -- pooling, normalisation, data movement ---------------------------------------------------


@pytest.mark.parametrize("pipeline", ["O0", "O2"])
@pytest.mark.parametrize(
    "op,attrs",
    [
        ("MaxPool", {"kernel_shape": [3, 3], "strides": [2, 2], "pads": [1, 1, 1, 1]}),
        ("MaxPool", {"kernel_shape": [2, 2], "strides": [2, 2], "ceil_mode": 1}),
        ("AveragePool", {"kernel_shape": [3, 3], "strides": [1, 1], "pads": [1, 1, 1, 1]}),
        (
            "AveragePool",
            {
                "kernel_shape": [3, 3],
                "strides": [2, 2],
                "pads": [1, 1, 1, 1],
                "count_include_pad": 1,
            },
        ),
        ("GlobalAveragePool", {}),
        ("GlobalMaxPool", {}),
    ],
)
def test_pool_after_conv(op, attrs, pipeline):
    nodes = [
        helper.make_node("Conv", ["x", "w"], ["a"], pads=[1, 1, 1, 1]),
        helper.make_node(op, ["a"], ["y"], **attrs),
    ]
    run_both(
        model(nodes, [("x", [1, 16, 11, 13])], ["y"], [("w", rnd(32, 16, 3, 3))]),
        pipeline,
        seeds=(0,),
    )


@pytest.mark.parametrize(
    "shape,axis", [([3, 37], -1), ([2, 5, 7], 1), ([1, 1000], 1), ([4, 16], 0)]
)
@pytest.mark.parametrize("op", ["Softmax", "LogSoftmax"])
def test_softmax(shape, axis, op):
    run_both(
        model([helper.make_node(op, ["x"], ["y"], axis=axis)], [("x", shape)], ["y"]),
        "O0",
        seeds=(0,),
    )


@pytest.mark.parametrize("shape,axis", [([3, 37], -1), ([2, 8, 256], 2), ([2, 3, 5], 1)])
def test_layernorm(shape, axis):
    d = shape[axis:] if axis >= 0 else shape[axis:]
    inits = [("s", rnd(*d, seed=7) + 1), ("b", rnd(*d, seed=8))]
    node = helper.make_node("LayerNormalization", ["x", "s", "b"], ["y"], axis=axis, epsilon=1e-5)
    run_both(model([node], [("x", shape)], ["y"], inits), "O0", seeds=(0,))


@pytest.mark.parametrize("axes", [[1], [0, 2], [2], [0, 1, 2]])
@pytest.mark.parametrize(
    "op",
    [
        "ReduceSum",
        "ReduceMean",
        "ReduceMax",
        "ReduceMin",
        "ReduceSumSquare",
        "ReduceL1",
        "ReduceL2",
    ],
)
@pytest.mark.parametrize("keepdims", [0, 1])
def test_reduce(op, axes, keepdims):
    ax = numpy_helper.from_array(np.array(axes, np.int64), "ax")
    m = model(
        [helper.make_node(op, ["x", "ax"], ["y"], keepdims=keepdims)],
        [("x", [3, 17, 5])],
        ["y"],
        opset=18,
    )
    m.graph.initializer.append(ax)
    run_both(m, "O0", seeds=(0,))


@pytest.mark.parametrize("size", [3, 5])
def test_lrn(size):
    node = helper.make_node("LRN", ["x"], ["y"], size=size, alpha=1e-3, beta=0.75, bias=1.0)
    run_both(model([node], [("x", [2, 7, 5, 9])], ["y"]), "O0", seeds=(0,))


@pytest.mark.parametrize(
    "node,shape",
    [
        (helper.make_node("Transpose", ["x"], ["y"], perm=[0, 2, 3, 1]), [2, 3, 5, 7]),
        (helper.make_node("Transpose", ["x"], ["y"], perm=[2, 0, 1]), [3, 17, 4]),
        (helper.make_node("Pad", ["x", "p"], ["y"]), [2, 3, 5]),
    ],
)
def test_copies(node, shape):
    inits = [("p", np.array([0, 1, 2, 1, 0, 3], np.int64))] if node.op_type == "Pad" else []
    m = model([helper.make_node("Relu", ["x"], ["r"]), node], [("x", shape)], ["y"], inits)
    m.graph.node[1].input[0] = "r"
    run_both(m, "O0", seeds=(0,))


def test_strided_concat_split_and_slice():
    nodes = [
        helper.make_node("Relu", ["x"], ["a"]),
        helper.make_node("Neg", ["x"], ["b"]),
        helper.make_node("Concat", ["a", "b"], ["c"], axis=2),
        helper.make_node("Split", ["c"], ["s1", "s2"], axis=1, num_outputs=2),
        helper.make_node("Slice", ["s2", "st", "en", "ax", "sp"], ["y"]),
        helper.make_node("Add", ["s1", "s1"], ["z"]),
    ]
    inits = [
        ("st", np.array([1, 0], np.int64)), ("en", np.array([9, 5], np.int64)),
        ("ax", np.array([2, 1], np.int64)), ("sp", np.array([3, 1], np.int64)),
    ]  # fmt: skip
    m = model(nodes, [("x", [2, 6, 5])], ["y", "z"], inits, opset=18)
    run_both(m, "O0", seeds=(0,))


def test_an_op_without_an_emitter_is_a_named_cpu_partition():
    m = model(
        [helper.make_node("Relu", ["x"], ["a"]), helper.make_node("Sin", ["a"], ["y"])],
        [("x", [4, 5])],
        ["y"],
    )
    g, _ = optimize(import_onnx(m, {}), "O0")
    c = plan(g)
    rep = c.partition_report
    assert [p["backend"] for p in rep["partitions"]] == ["native", "cpu"]
    assert "no emitter for Sin" in str(c.partitions.declines)
    rt, code = jit(c)  # the native half is generated code, the cpu half the interpreter
    x = np.random.default_rng(0).standard_normal((4, 5)).astype(np.float32)
    np.testing.assert_allclose(rt.run({"x": x})["y"], np.sin(np.maximum(x, 0)), rtol=1e-6)
    assert code.plan.main is None and len(code.plan.partitions) == 1
    (row,) = rt.profile({"x": x}, 2)  # the native partition's one kernel, profiled
    assert row["op"] == "Relu" and row["share"] == 1.0


@pytest.mark.parametrize("h,w", [(5, 16), (3, 37), (2, 7)])
def test_relayouts_to_and_from_blocked(h, w):
    # Three 16-channel convs make a blocked region: Relayout in, Relayout out; widths hit
    # the transposed tiles, a tile plus a tail, and a tail alone.
    nodes = [
        helper.make_node("Conv", ["x", "w1"], ["a"], pads=[1, 1, 1, 1]),
        helper.make_node("Conv", ["a", "w2"], ["c"], pads=[1, 1, 1, 1]),
        helper.make_node("Conv", ["c", "w3"], ["y"], pads=[1, 1, 1, 1]),
    ]
    inits = [
        ("w1", rnd(32, 16, 3, 3)),
        ("w2", rnd(16, 32, 3, 3, seed=9)),
        ("w3", rnd(16, 16, 3, 3, seed=10)),
    ]
    g, code = run_both(model(nodes, [("x", [2, 16, h, w])], ["y"], inits), "O2", seeds=(0,))
    assert [s.op for s in code.plan.steps()].count("Relayout") == 2


@pytest.mark.parametrize("shape", [[1], [3, 37], [2, 5, 17]])
def test_fill_from_constant_of_shape(shape):
    """ConstantOfShape left unfolded (O0) is a Fill kernel: every element is the value."""
    shp = np.array(shape, dtype=np.int64)
    value = helper.make_tensor("v", TensorProto.FLOAT, [1], [0.625])
    nodes = [
        helper.make_node("ConstantOfShape", ["shp"], ["c"], value=value),
        helper.make_node("Add", ["x", "c"], ["y"]),
    ]
    g, code = run_both(model(nodes, [("x", shape)], ["y"], [("shp", shp)]), "O0", seeds=(0,))
    assert "Fill" in {n.op for n in g.nodes}


@pytest.mark.parametrize("isa", ["host", *TARGETS])
@pytest.mark.parametrize(
    "shape,perm",
    [([1, 32, 4, 16], [0, 2, 3, 1]), ([2, 48, 3, 32], [0, 2, 3, 1]), ([64, 48], [1, 0]),
     ([40, 24], [1, 0]), ([3, 16, 5, 24], [2, 3, 0, 1]), ([2, 3, 5, 7], [0, 2, 3, 1])],
)  # fmt: skip
def test_transposes_equal_the_reference_bit_for_bit(isa, shape, perm):
    """A float Transpose that moves the input's innermost dim away from the output's goes by
    vector-width tiles transposed in registers where both dims are multiples of the width
    (attention's k^T), by the strided copy elsewhere; either way the bits of the reference
    interpreter at 1 and 2 threads."""
    from guard.compiler.codegen.build import host_target
    from guard.compiler.codegen.emit_tensor import tiled_transpose_dims

    from .._helpers import assert_native_equals_reference

    target = host_target() if isa == "host" else skip_unless_runnable(isa)
    m = model(
        [
            helper.make_node("Relu", ["x"], ["r"]),
            helper.make_node("Transpose", ["r"], ["y"], perm=perm),
        ],
        [("x", shape)],
        ["y"],
    )
    g, _ = optimize(import_onnx(m, {}), "O0")

    def feeds(seed: int) -> dict[str, np.ndarray]:
        return {"x": np.random.default_rng(seed).standard_normal(shape).astype(np.float32)}

    assert_native_equals_reference(g, target, feeds)
    w = target.table.vector_width
    out = [shape[p] for p in perm]
    in_st = [int(np.prod(shape[p + 1 :])) for p in perm]
    inner = perm.index(len(shape) - 1)  # the output dim the input's innermost dim became
    tiled = inner != len(out) - 1 and out[-1] % w == 0 and out[inner] % w == 0
    assert tiled_transpose_dims(out, in_st, w) == ((len(out) - 1, inner) if tiled else None)
