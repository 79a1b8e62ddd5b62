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
from guard.compiler.ir.target import table_for
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
