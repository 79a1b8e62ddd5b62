"""Bad quantization parameters are bad input: the importer names the node and the tensor
(exit 2), for QuantizeLinear, DequantizeLinear and the QLinear ops."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from guard.cli.main import main
from guard.compiler import import_onnx, run_reference
from guard.core.errors import EXIT_BAD_INPUT, ModelError

F, U8, I8 = TensorProto.FLOAT, TensorProto.UINT8, TensorProto.INT8


def dq_model(scale, zp=3, axis=None, x_shape=(1, 4, 2, 2), x_type=U8):
    zp = np.uint8(zp) if isinstance(zp, int) else zp
    attrs = {} if axis is None else {"axis": axis}
    node = helper.make_node("DequantizeLinear", ["x", "s", "z"], ["y"], name="dq0", **attrs)
    g = helper.make_graph(
        [node], "g", [helper.make_tensor_value_info("x", x_type, list(x_shape))],
        [helper.make_tensor_value_info("y", F, None)],
        [numpy_helper.from_array(np.asarray(scale, np.float32), "s"),
         numpy_helper.from_array(np.asarray(zp), "z")],
    )  # fmt: skip
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 13)])


@pytest.mark.parametrize("bad", [0.0, -0.5, np.nan, np.inf])
def test_a_scale_that_is_not_finite_and_positive_names_node_and_tensor(bad):
    with pytest.raises(ModelError) as e:
        import_onnx(dq_model(np.float32(bad)))
    msg = str(e.value)
    assert "'dq0'" in msg and "scale 's'" in msg and "finite and > 0" in msg
    assert e.value.exit_code == EXIT_BAD_INPUT


def test_one_bad_channel_of_a_per_axis_scale():
    with pytest.raises(ModelError, match=r"scale 's' holds 0"):
        import_onnx(dq_model(np.array([0.1, 0.2, 0.0, 0.1]), np.zeros(4, np.uint8), axis=1))


def test_a_zero_point_of_another_type_than_the_tensor():
    with pytest.raises(
        ModelError, match=r"zero point 'z' is int8, but the quantized tensor is uint8"
    ):
        import_onnx(dq_model(np.float32(0.1), np.int8(3)))


def test_a_per_axis_scale_whose_length_is_not_the_axis():
    with pytest.raises(
        ModelError, match=r"per-axis scale 's' has shape \[3\], but axis 1 of 'x' has 4"
    ):
        import_onnx(dq_model(np.full(3, 0.1), np.zeros(3, np.uint8), axis=1))


def test_qlinear_conv_checks_its_three_scales():
    x = helper.make_tensor_value_info("x", U8, [1, 2, 3, 3])
    inits = {
        "sx": np.float32(0.1), "zx": np.uint8(0), "w": np.ones((3, 2, 1, 1), np.int8),
        "sw": np.array([0.1, 0.1], np.float32), "zw": np.zeros(2, np.int8),
        "sy": np.float32(0.2), "zy": np.uint8(0),
    }  # fmt: skip
    node = helper.make_node(
        "QLinearConv", ["x", "sx", "zx", "w", "sw", "zw", "sy", "zy"], ["y"], name="qc"
    )
    g = helper.make_graph(
        [node], "g", [x], [helper.make_tensor_value_info("y", U8, None)],
        [numpy_helper.from_array(v, k) for k, v in inits.items()],
    )  # fmt: skip
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 13)])
    with pytest.raises(ModelError, match=r"'qc'.*per-axis scale 'sw' has shape \[2\], but axis 0"):
        import_onnx(m)


def test_cli_exit_2_with_one_line(tmp_path, capsys):
    path = tmp_path / "bad.onnx"
    onnx.save(dq_model(np.float32(0.0)), str(path))
    assert main(["partition", str(path)]) == EXIT_BAD_INPUT
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "scale 's' holds 0" in err[0] and "'dq0'" in err[0]


def test_opset_11_per_axis_dequantize_runs_with_one_warning_line(capsys):
    """What onnxruntime's quantiser writes for a model below opset 13 (FACTS.md)."""
    m = dq_model(np.array([0.1, 0.2, 0.3, 0.4]), np.arange(4, dtype=np.uint8), axis=1)
    m.opset_import[0].version = 11
    with pytest.raises(onnx.checker.ValidationError):
        onnx.checker.check_model(m)
    with pytest.warns(
        RuntimeWarning,
        match=r"1 QuantizeLinear/DequantizeLinear node\(s\) \(first 'dq0'\) carry an 'axis' attribute, which opset 11 does not define",
    ):  # noqa: E501
        g = import_onnx(m)
    x = np.arange(16, dtype=np.uint8).reshape(1, 4, 2, 2)
    y = run_reference(g, {"x": x})["y"]
    want = (x.astype(np.float32) - np.arange(4).reshape(1, 4, 1, 1)) * np.float32(
        [0.1, 0.2, 0.3, 0.4]
    ).reshape(1, 4, 1, 1)
    np.testing.assert_array_equal(y, want.astype(np.float32))
