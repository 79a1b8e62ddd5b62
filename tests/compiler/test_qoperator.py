"""onnxruntime's QOperator contrib ops and DynamicQuantizeLinear: imported as DQ -> float
op -> Q, run natively bit-identical to the reference interpreter, and within one
quantization step of onnxruntime's own kernels."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from guard.compiler import import_onnx, optimize, run_reference
from guard.compiler.codegen.build import jit
from guard.compiler.partition.plan import plan

from .codegen._jit import skip_unless_runnable

U8, I8, F = TensorProto.UINT8, TensorProto.INT8, TensorProto.FLOAT
MS = "com.microsoft"


def _model(op: str, elem: int, **attrs) -> onnx.ModelProto:
    dt = np.uint8 if elem == U8 else np.int8
    zps = {"za": 3, "zb": 250, "zy": 128} if elem == U8 else {"za": -3, "zb": 100, "zy": 0}
    inits = [numpy_helper.from_array(np.asarray(v, dt), k) for k, v in zps.items()]
    inits += [numpy_helper.from_array(np.float32(v), k) for k, v in
              {"sa": 0.05, "sb": 0.031, "sy": 0.07}.items()]  # fmt: skip
    shape = [1, 4, 3, 3]
    ins = [("a", shape), ("b", [1, 4, 1, 1])]
    if op in ("QLinearAdd", "QLinearMul"):
        node = helper.make_node(
            op, ["a", "sa", "za", "b", "sb", "zb", "sy", "zy"], ["y"], domain=MS
        )
    elif op == "QLinearConcat":
        ins = [("a", shape), ("b", [1, 2, 3, 3])]
        node = helper.make_node(
            op, ["sy", "zy", "a", "sa", "za", "b", "sb", "zb"], ["y"], domain=MS, axis=1
        )
    else:
        ins = ins[:1]
        node = helper.make_node(op, ["a", "sa", "za", "sy", "zy"], ["y"], domain=MS, **attrs)
    g = helper.make_graph(
        [node], "q", [helper.make_tensor_value_info(n, elem, s) for n, s in ins],
        [helper.make_tensor_value_info("y", elem, None)], inits,
    )  # fmt: skip
    return helper.make_model(
        g, opset_imports=[helper.make_opsetid("", 13), helper.make_opsetid(MS, 1)]
    )


def _feeds(m: onnx.ModelProto, seed: int) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(seed)
    out = {}
    for vi in m.graph.input:
        dt = helper.tensor_dtype_to_np_dtype(vi.type.tensor_type.elem_type)
        shape = [d.dim_value for d in vi.type.tensor_type.shape.dim]
        info = np.iinfo(dt) if dt != np.float32 else None
        out[vi.name] = (
            rng.integers(info.min, int(info.max) + 1, shape).astype(dt)
            if info is not None
            else (rng.standard_normal(shape) * 3).astype(np.float32)
        )
    return out


CASES = [
    ("QLinearAdd", {}), ("QLinearMul", {}), ("QLinearConcat", {}),
    ("QLinearGlobalAveragePool", {}), ("QLinearGlobalAveragePool", {"channels_last": 1}),
    ("QLinearSigmoid", {}), ("QLinearLeakyRelu", {"alpha": 0.2}),
]  # fmt: skip


@pytest.mark.parametrize("elem", [U8, I8])
@pytest.mark.parametrize("op,attrs", CASES, ids=lambda c: str(c))
def test_contrib_op_native_equals_reference_and_near_onnxruntime(op, attrs, elem):
    import onnxruntime as ort

    target = skip_unless_runnable("avx2")
    m = _model(op, elem, **attrs)
    g0 = import_onnx(m)
    assert {n.op for n in g0.nodes} >= {"DequantizeLinear", "QuantizeLinear"}
    g, _ = optimize(g0, "O2")
    compiled = plan(g)
    assert compiled.partition_report["count"] == 1, dict(compiled.partitions.declines)
    rt, _ = jit(compiled, target)
    sess = ort.InferenceSession(m.SerializeToString(), providers=["CPUExecutionProvider"])
    for seed in (0, 1):
        f = _feeds(m, seed)
        ref = run_reference(g0, f)["y"]
        np.testing.assert_array_equal(rt.run(f)["y"], ref)
        (theirs,) = sess.run(None, f)
        assert theirs.dtype == ref.dtype and theirs.shape == ref.shape
        diff = np.abs(theirs.astype(np.int32) - ref.astype(np.int32))
        assert diff.max() <= 1, (op, diff.max())


def test_dynamic_quantize_linear_native_equals_reference_and_onnx():
    from onnx.reference import ReferenceEvaluator

    target = skip_unless_runnable("avx2")
    node = helper.make_node("DynamicQuantizeLinear", ["x"], ["y", "s", "z"])
    g = helper.make_graph(
        [node], "d", [helper.make_tensor_value_info("x", F, [3, 50])],
        [helper.make_tensor_value_info(n, t, None) for n, t in (("y", U8), ("s", F), ("z", U8))],
    )  # fmt: skip
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 13)])
    g0 = import_onnx(m)
    compiled = plan(optimize(g0, "O2")[0])
    assert compiled.partition_report["count"] == 1, dict(compiled.partitions.declines)
    rt, _ = jit(compiled, target)
    rng = np.random.default_rng(0)
    xs = [
        (rng.standard_normal((3, 50)) * 7).astype(np.float32),
        np.abs(rng.standard_normal((3, 50))).astype(np.float32),  # no negatives: zp 0
        -np.abs(rng.standard_normal((3, 50))).astype(np.float32),  # no positives: zp 255
        np.zeros((3, 50), np.float32),  # an empty range: scale 1/255
    ]
    for x in xs:
        ref = run_reference(g0, {"x": x})
        got = rt.run({"x": x})
        onnx_ref = ReferenceEvaluator(m).run(None, {"x": x})
        for k, want in zip(("y", "s", "z"), onnx_ref, strict=True):
            np.testing.assert_array_equal(ref[k], want, err_msg=k)
            np.testing.assert_array_equal(got[k], ref[k], err_msg=k)


def test_unknown_contrib_op_is_declined_naming_it():
    from guard.core.errors import UnsupportedOpError

    m = _model("QLinearAdd", U8)
    m.graph.node[0].op_type = "QLinearSoftmax"
    with pytest.raises(UnsupportedOpError, match="QLinearSoftmax.*com.microsoft"):
        import_onnx(m)
