"""lower_qdq: Q/DQ on activations become the reference's float32 steps, bit-identical to
the unlowered graph (ties, saturation, infinities, per axis), fused by fuse_elementwise
with their neighbours; constants, block quantisation and int16 stay as they are."""

from __future__ import annotations

import numpy as np
import pytest
from onnx import TensorProto, helper, numpy_helper

from guard.compiler import import_onnx, optimize, run_reference
from guard.compiler.passes.lower_qdq import LowerQdq

from ._helpers import apply, ops

U8, I8, F = TensorProto.UINT8, TensorProto.INT8, TensorProto.FLOAT


def _model(elem=U8, per_axis=False, zero_zp=False):
    """x -> Q -> DQ -> Mul(per-channel) -> Add -> Q -> DQ -> y (BN's affine between)."""
    rng = np.random.default_rng(1)
    dt = np.uint8 if elem == U8 else np.int8
    n = 3 if per_axis else 1
    s1 = rng.uniform(0.02, 0.1, n).astype(np.float32)
    z1 = (np.zeros(n) if zero_zp else rng.integers(0, 100, n)).astype(dt)
    if not per_axis:
        s1, z1 = s1.reshape(()), z1.reshape(())
    inits = [
        numpy_helper.from_array(s1, "s1"), numpy_helper.from_array(z1, "z1"),
        numpy_helper.from_array(np.float32(0.0713), "s2"),
        numpy_helper.from_array(np.asarray(0 if zero_zp else 17, dt), "z2"),
        numpy_helper.from_array(rng.uniform(0.5, 2, (1, 3, 1, 1)).astype(np.float32), "m"),
        numpy_helper.from_array(rng.standard_normal((1, 3, 1, 1)).astype(np.float32), "a"),
    ]  # fmt: skip
    ax = {"axis": 1} if per_axis else {}
    nodes = [
        helper.make_node("QuantizeLinear", ["x", "s1", "z1"], ["q"], **ax),
        helper.make_node("DequantizeLinear", ["q", "s1", "z1"], ["d"], **ax),
        helper.make_node("Mul", ["d", "m"], ["p"]),
        helper.make_node("Add", ["p", "a"], ["b"]),
        helper.make_node("QuantizeLinear", ["b", "s2", "z2"], ["q2"]),
        helper.make_node("DequantizeLinear", ["q2", "s2", "z2"], ["y"]),
    ]
    g = helper.make_graph(
        nodes, "l", [helper.make_tensor_value_info("x", F, [2, 3, 4, 5])],
        [helper.make_tensor_value_info("y", F, None), helper.make_tensor_value_info("q2", elem, None)],
        inits,
    )  # fmt: skip
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 13)])


def _feeds(seed: int) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(seed)
    x = (rng.standard_normal((2, 3, 4, 5)) * 3).astype(np.float32)
    flat = x.reshape(-1)
    flat[:20] = (np.arange(-10, 10) + 0.5).astype(np.float32) * np.float32(0.0713)
    flat[20:24] = [1e9, -1e9, np.inf, -np.inf]
    return {"x": x}


@pytest.mark.parametrize("elem", [U8, I8])
@pytest.mark.parametrize("per_axis", [False, True])
@pytest.mark.parametrize("zero_zp", [False, True])
def test_lowered_steps_are_bit_identical(elem, per_axis, zero_zp):
    g = import_onnx(_model(elem, per_axis, zero_zp))
    g2, res = apply(LowerQdq(), g)
    assert "QuantizeLinear" not in ops(g2) and "DequantizeLinear" not in ops(g2)
    assert res.stats == {"num_lowered_quantize": 2, "num_lowered_dequantize": 2}
    assert "Div" in ops(g2) and "Round" in ops(g2) and ("Sub" in ops(g2)) != zero_zp
    assert sum(1 for n in g2.nodes if n.attrs.get("qdq")) == 4
    for seed in (0, 1, 2):
        a, b = run_reference(g, _feeds(seed)), run_reference(g2, _feeds(seed))
        for k in a:
            assert a[k].dtype == b[k].dtype
            np.testing.assert_array_equal(b[k], a[k], err_msg=k)


def test_in_o2_the_affine_between_fuses_into_one_kernel():
    g = import_onnx(_model())
    g2, rep = optimize(g, "O2", verify_each=True)
    names = [p.name for p in rep.passes]
    assert names.index("lower_qdq") == names.index("fuse_elementwise") - 1
    fused = [n for n in g2.nodes if n.op == "FusedElementwise"]
    # DQ -> Mul -> Add -> Q is one program (the Q's result is also an output: it ends there)
    assert any([st["op"] for st in n.attrs["program"]][:3] == ["Cast", "Sub", "Mul"] for n in fused)
    for seed in (0, 1):
        a, b = run_reference(g, _feeds(seed)), run_reference(g2, _feeds(seed))
        for k in a:
            np.testing.assert_array_equal(b[k], a[k], err_msg=k)


def test_does_not_lower_constants_blocks_or_int16():
    s = numpy_helper.from_array(np.full((2, 2), 0.1, np.float32), "s")
    nodes = [
        helper.make_node("DequantizeLinear", ["w", "s1"], ["wd"]),
        helper.make_node("DequantizeLinear", ["xb", "s"], ["bd"], axis=0, block_size=2),
        helper.make_node("DequantizeLinear", ["x16", "s1"], ["d16"]),
        helper.make_node("Add", ["wd", "d16"], ["y"]),
    ]
    g = helper.make_graph(
        nodes, "n",
        [helper.make_tensor_value_info("xb", U8, [4, 2]),
         helper.make_tensor_value_info("x16", TensorProto.INT16, [2])],
        [helper.make_tensor_value_info("y", F, None), helper.make_tensor_value_info("bd", F, None)],
        [numpy_helper.from_array(np.arange(2, dtype=np.uint8), "w"), s,
         numpy_helper.from_array(np.float32(0.5), "s1")],
    )  # fmt: skip
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 21)])
    g0 = import_onnx(m)
    g2, res = apply(LowerQdq(), g0)
    assert not res.changed and ops(g2) == ops(g0)
