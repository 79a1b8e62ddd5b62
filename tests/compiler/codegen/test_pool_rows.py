"""AveragePool in NCHW with lanes along the output row (pool_rows.py): bit-identical to
the reference interpreter (each lane sums its taps in the reference's order, then one
division by the exact count), on the AVX2 and AVX-512 classes and the host, at 1 and 2
threads: strides 1 and 2, pads with and without count_include_pad, ceil_mode, dilation,
rows of several vectors (an interior run) and short last vectors, 1-D pooling, and a
quantized model's DequantizeLinear -> AveragePool -> QuantizeLinear."""

from __future__ import annotations

import numpy as np
import pytest
from onnx import TensorProto, helper

from guard.compiler import import_onnx, optimize, run_reference
from guard.compiler.codegen.build import host_target, jit
from guard.compiler.partition.plan import plan

from ._jit import TARGETS, skip_unless_runnable
from .test_emit_ops import graph_model

CASES = {
    "3x3/2": dict(x=[1, 24, 56, 56], kernel_shape=[3, 3], strides=[2, 2], pads=[1, 1, 1, 1]),
    "3x3/1 incl": dict(x=[1, 5, 14, 40], kernel_shape=[3, 3], strides=[1, 1], pads=[1, 1, 1, 1],
                       count_include_pad=1),
    "2x2/2": dict(x=[2, 3, 28, 29], kernel_shape=[2, 2], strides=[2, 2]),
    "ceil": dict(x=[1, 4, 13, 37], kernel_shape=[3, 3], strides=[2, 2], pads=[0, 1, 1, 0],
                 ceil_mode=1),
    "ceil incl": dict(x=[1, 4, 13, 37], kernel_shape=[3, 2], strides=[2, 3], pads=[1, 1, 1, 0],
                      ceil_mode=1, count_include_pad=1),
    "dilated": dict(x=[1, 3, 20, 70], kernel_shape=[3, 3], strides=[1, 1], pads=[2, 2, 2, 2],
                    dilations=[2, 2]),
    "7x7": dict(x=[1, 8, 7, 7], kernel_shape=[7, 7], strides=[1, 1]),
    "1-D": dict(x=[1, 6, 100], kernel_shape=[5], strides=[2], pads=[2, 2]),
}  # fmt: skip


def _model(x, quantized=False, **attrs):
    nodes = [helper.make_node("AveragePool", ["d" if quantized else "x"], ["y"], **attrs)]
    inits = []
    if quantized:
        inits = [("s", np.float32(0.037)), ("z", np.uint8(113))]
        nodes = [helper.make_node("DequantizeLinear", ["x", "s", "z"], ["d"]), *nodes,
                 helper.make_node("QuantizeLinear", ["y", "s", "z"], ["q"])]  # fmt: skip
    elem = TensorProto.UINT8 if quantized else TensorProto.FLOAT
    out = "q" if quantized else "y"
    return graph_model(nodes, [("x", x, elem)], [out], inits, opset=13, out_type=elem)


def _check(m, isa: str, feeds) -> None:
    target = host_target() if isa == "host" else skip_unless_runnable(isa)
    g0 = import_onnx(m, {})
    compiled = plan(optimize(g0, "O0")[0])
    assert compiled.partition_report["fallback_nodes"] == 0
    rt, code = jit(compiled, target, 1)
    rt2, _ = jit(compiled, target, 2, code=code)
    ref = run_reference(g0, feeds)
    for r in (rt, rt2):
        out = r.run(feeds)
        for k in ref:
            assert out[k].dtype == ref[k].dtype
            np.testing.assert_array_equal(out[k], ref[k], err_msg=k)


@pytest.mark.parametrize("isa", [*TARGETS, "host"])
@pytest.mark.parametrize("case", list(CASES))
def test_average_pool_rows_are_bit_identical(isa: str, case: str) -> None:
    attrs = dict(CASES[case])
    shape = attrs.pop("x")
    rng = np.random.default_rng(0)
    x = (rng.standard_normal(shape) * 3).astype(np.float32)
    x.reshape(-1)[:5] = [-0.0, np.inf, -np.inf, 1e30, -1e-30]
    _check(_model(shape, **attrs), isa, {"x": x})


@pytest.mark.parametrize("isa", [*TARGETS, "host"])
def test_a_quantized_average_pool_requantises_bit_for_bit(isa: str) -> None:
    shape = [1, 136, 28, 28]
    attrs = dict(kernel_shape=[3, 3], strides=[2, 2], pads=[1, 1, 1, 1])
    x = np.random.default_rng(1).integers(0, 256, shape).astype(np.uint8)
    _check(_model(shape, quantized=True, **attrs), isa, {"x": x})
