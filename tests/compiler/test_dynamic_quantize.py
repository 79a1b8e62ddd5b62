"""DynamicQuantizeLinear exactly as ONNX defines it, on the inputs where a shortcut shows:
the range always includes 0, the zero point and every value round half to even, and a
value past the range after rounding saturates at 255. The reference interpreter equals the
spec's formula (written out here in float32) and onnx's ReferenceEvaluator, and the
generated code (the host's, and the AVX2 build where it runs) equals the reference."""

from __future__ import annotations

import numpy as np
import pytest
from onnx import TensorProto, helper

from guard.compiler import import_onnx, optimize, run_reference
from guard.compiler.codegen.build import host_target, jit
from guard.compiler.partition.plan import plan

from .codegen._jit import skip_unless_runnable

F, U8 = TensorProto.FLOAT, TensorProto.UINT8

# name: (data, expected zero point, the ties it holds)
CASES = {
    # span 255 from 0: scale exactly 1; 2.5 -> 2 and 3.5 -> 4 (half to even), zp 0
    "ties": ([0.0, 255.0, 2.5, 3.5, 100.5, 101.5, 0.5], 0),
    # min -2.5, max 252.5: scale 1, zp = rint(2.5) = 2 (half to even, not 3)
    "zero_point_tie": ([-2.5, 252.5, 7.5, -0.5, 0.0], 2),
    # min -1.5, max 253.5: zp = rint(1.5) = 2, and rint(253.5) + 2 = 256 saturates to 255
    "saturates": ([-1.5, 253.5, 252.5, 1.5, -1.0], 2),
    # no negatives: the range still starts at 0 (zp 0); no positives: it ends at 0 (zp 255)
    "positive": ([0.25, 3.0, 1.75, 2.0], 0),
    "negative": ([-0.25, -3.0, -1.75, -2.0], 255),
    "zeros": ([0.0, 0.0, 0.0, 0.0], 0),  # an empty range: scale 1/255
}


def _spec(x: np.ndarray) -> tuple[np.ndarray, np.float32, np.uint8]:
    """The ONNX operator's definition, step by step in float32."""
    x_max = np.float32(max(np.float32(0), x.max()))
    x_min = np.float32(min(np.float32(0), x.min()))
    span = np.float32(x_max - x_min) if x_max != x_min else np.float32(1)
    scale = np.float32(span / np.float32(255))
    zp = np.uint8(np.rint(np.clip(np.float32(0) - x_min / scale, 0, 255)))
    y = np.clip(np.rint(x / scale) + np.float32(zp), 0, 255).astype(np.uint8)
    return y, scale, zp


def _model(n: int):
    node = helper.make_node("DynamicQuantizeLinear", ["x"], ["y", "s", "z"])
    g = helper.make_graph(
        [node], "d", [helper.make_tensor_value_info("x", F, [n])],
        [helper.make_tensor_value_info(k, t, None) for k, t in (("y", U8), ("s", F), ("z", U8))],
    )  # fmt: skip
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 13)])


@pytest.mark.parametrize("case", list(CASES))
def test_reference_is_the_spec_and_onnx_and_generated_code_is_the_reference(case: str):
    from onnx.reference import ReferenceEvaluator

    data, zp = CASES[case]
    x = np.asarray(data, np.float32)
    m = _model(x.size)
    g = import_onnx(m)
    ref = run_reference(g, {"x": x})
    y, scale, z = _spec(x)
    assert int(z) == zp, (case, z)
    np.testing.assert_array_equal(ref["y"], y)
    assert ref["s"].dtype == np.float32 and ref["s"] == scale
    assert ref["z"].dtype == np.uint8 and ref["z"] == z
    for k, want in zip("ysz", ReferenceEvaluator(m).run(None, {"x": x}), strict=True):
        np.testing.assert_array_equal(ref[k], want, err_msg=k)
    if case == "saturates":
        assert ref["y"][1] == 255  # rint(253.5) + 2 would be 256
    if case == "ties":
        assert list(ref["y"][2:]) == [2, 4, 100, 102, 0]

    compiled = plan(optimize(g, "O2")[0])
    assert compiled.partition_report["count"] == 1
    targets = [host_target()]
    if case == "ties":  # one case is enough to tell the AVX2 build apart
        targets.append(skip_unless_runnable("avx2"))
    for target in targets:
        got = jit(compiled, target)[0].run({"x": x})
        for k in "ysz":
            np.testing.assert_array_equal(got[k], ref[k], err_msg=f"{k} {target.cpu}")
