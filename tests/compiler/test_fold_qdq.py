"""fold_qdq: DQ -> Conv/MatMul/Gemm (-> Relu/Clip) -> Q becomes QLinearConv/QLinearMatMul,
and DQ -> data movement -> Q with one scale runs on the quantized tensor.

Power-of-two scales and small values make the float graph exact, so there the folded
graph must equal it bit for bit; with arbitrary scales the float graph rounds each product
and sum to float32, and the two may land one quantization step apart (the pass's hazard).
"""

from __future__ import annotations

import numpy as np
import pytest
from onnx import TensorProto, helper, numpy_helper

from guard.compiler import import_onnx, optimize, run_reference, verify
from guard.compiler.passes.fold_qdq import FoldQdq

from ._helpers import apply, ops

F, U8, I8, I32 = TensorProto.FLOAT, TensorProto.UINT8, TensorProto.INT8, TensorProto.INT32


def qdq_model(
    anchor: str = "Conv",
    act: str = "",
    pow2: bool = True,
    per_channel: bool = True,
    act_type: int = U8,
    bias: bool = True,
    extra_reader: bool = False,
):
    """x -> Q -> DQ -> anchor(DQ(w), DQ(b)) [-> act] -> Q -> DQ -> y."""
    rng = np.random.default_rng(7)
    if anchor == "Conv":
        x_shape, w_shape, m, w_axis = [1, 3, 6, 6], [4, 3, 3, 3], 4, 0
        attrs = {"pads": [1, 1, 1, 1]}
    elif anchor == "Gemm":
        x_shape, w_shape, m, w_axis = [2, 6], [4, 6], 4, 0
        attrs = {"transB": 1}
    else:
        x_shape, w_shape, m, w_axis = [2, 3, 6], [6, 4], 4, 1
        attrs = {}
    if pow2:
        sx = np.float32(2.0**-3)
        sw = (2.0 ** -rng.integers(4, 7, m)).astype(np.float32)
        sy = np.float32(2.0**-1)
    else:
        sx = np.float32(0.0371)
        sw = rng.uniform(0.004, 0.02, m).astype(np.float32)
        sy = np.float32(0.0913)
    if not per_channel:
        sw = sw[:1].reshape(())
    zx = np.uint8(128) if act_type == U8 else np.int8(3)
    zy = np.uint8(100) if act_type == U8 else np.int8(-5)
    wq = rng.integers(-127, 128, w_shape).astype(np.int8)
    bq = rng.integers(-300, 300, m).astype(np.int32)
    bs = (np.float32(sx) * sw).astype(np.float32).reshape(-1) * np.ones(m, np.float32)
    inits = [
        numpy_helper.from_array(np.asarray(sx), "sx"),
        numpy_helper.from_array(np.asarray(zx), "zx"),
        numpy_helper.from_array(wq, "wq"),
        numpy_helper.from_array(np.asarray(sw), "sw"),
        numpy_helper.from_array(np.zeros(np.shape(sw), np.int8), "zw"),
        numpy_helper.from_array(bq, "bq"),
        numpy_helper.from_array(bs, "bs"),
        numpy_helper.from_array(np.asarray(sy), "sy"),
        numpy_helper.from_array(np.asarray(zy), "zy"),
    ]
    wattr = {"axis": w_axis} if per_channel else {}
    nodes = [
        helper.make_node("QuantizeLinear", ["x", "sx", "zx"], ["xq"]),
        helper.make_node("DequantizeLinear", ["xq", "sx", "zx"], ["xd"]),
        helper.make_node("DequantizeLinear", ["wq", "sw", "zw"], ["wd"], **wattr),
        helper.make_node("DequantizeLinear", ["bq", "bs"], ["bd"], axis=0),
        helper.make_node(anchor, ["xd", "wd", "bd"] if bias else ["xd", "wd"], ["a"], **attrs),
    ]
    last = "a"
    if act == "Relu":
        nodes.append(helper.make_node("Relu", ["a"], ["r"]))
        last = "r"
    elif act == "Clip":
        inits += [numpy_helper.from_array(np.float32(0), "lo"),
                  numpy_helper.from_array(np.float32(6), "hi")]  # fmt: skip
        nodes.append(helper.make_node("Clip", ["a", "lo", "hi"], ["r"]))
        last = "r"
    nodes += [
        helper.make_node("QuantizeLinear", [last, "sy", "zy"], ["yq"]),
        helper.make_node("DequantizeLinear", ["yq", "sy", "zy"], ["y"]),
    ]
    outputs = [helper.make_tensor_value_info("y", F, None)]
    if extra_reader:
        outputs.append(helper.make_tensor_value_info("a", F, None))
    g = helper.make_graph(
        nodes, "qdq", [helper.make_tensor_value_info("x", F, x_shape)], outputs, inits
    )
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 13)])


def _feeds(g, seed: int, pow2: bool) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(seed)
    shape = g.values["x"].shape
    if pow2:  # exact in the float graph: multiples of the input scale
        return {"x": (rng.integers(-100, 100, shape) * 2.0**-3).astype(np.float32)}
    return {"x": (rng.standard_normal(shape) * 3).astype(np.float32)}


def _compare(g, g2, pow2: bool, seeds=(0, 1, 2)) -> None:
    for seed in seeds:
        f = _feeds(g, seed, pow2)
        a, b = run_reference(g, f)["y"], run_reference(g2, f)["y"]
        sy = 2.0**-1 if pow2 else 0.0913
        steps = np.rint(np.abs(a.astype(np.float64) - b) / sy)
        if pow2:
            np.testing.assert_array_equal(b, a)
        else:
            assert steps.max() <= 1 and (steps == 0).mean() >= 0.97, (steps.max(), steps.mean())


@pytest.mark.parametrize("act", ["", "Relu", "Clip"])
@pytest.mark.parametrize("act_type", [U8, I8])
def test_conv_folds_to_qlinearconv_bit_identical(act, act_type):
    g = import_onnx(qdq_model("Conv", act, act_type=act_type))
    g2, res = apply(FoldQdq(), g)
    assert ops(g2) == ["QuantizeLinear", "QLinearConv", "DequantizeLinear"]
    node = g2.nodes[1]
    assert len(node.inputs) == 9 and g2.values[node.inputs[8]].dtype == np.int32
    assert g2.values[node.inputs[4]].shape == (4,)  # per output channel
    assert res.stats["num_folded_conv"] == 1 and res.stats["num_activations"] == (act != "")
    zy = 100 if act_type == U8 else -5
    if act == "Relu":
        assert node.attrs["qmin"] == zy and "qmax" not in node.attrs
    if act == "Clip":  # 0 and 6 at sy = 0.5: zy and zy + 12
        assert node.attrs["qmin"] == zy and node.attrs["qmax"] == zy + 12
    _compare(g, g2, pow2=True)


@pytest.mark.parametrize("anchor", ["Conv", "Gemm", "MatMul"])
@pytest.mark.parametrize("per_channel", [True, False])
def test_arbitrary_scales_within_one_step(anchor, per_channel):
    g = import_onnx(qdq_model(anchor, "Relu", pow2=False, per_channel=per_channel))
    g2, res = apply(FoldQdq(), g)
    want = "QLinearConv" if anchor == "Conv" else "QLinearMatMul"
    assert ops(g2) == ["QuantizeLinear", want, "DequantizeLinear"], res.notes
    _compare(g, g2, pow2=False)


def test_gemm_transposes_its_weights_and_takes_the_bias_as_the_ninth_input():
    g = import_onnx(qdq_model("Gemm", pow2=True))
    g2, _ = apply(FoldQdq(), g)
    mm = g2.nodes[1]
    assert mm.op == "QLinearMatMul" and g2.values[mm.inputs[3]].shape == (6, 4)
    assert g2.values[mm.inputs[8]].shape == (4,)
    _compare(g, g2, pow2=True)


def test_in_the_o2_pipeline_before_constant_folding():
    g = import_onnx(qdq_model("Conv", "Relu"))
    g2, rep = optimize(g, "O2", verify_each=True)
    assert "QLinearConv" in ops(g2)
    assert rep.passes[0].name == "fold_qdq" and rep.passes[0].stats["num_folded_conv"] == 1
    _compare(g, g2, pow2=True)


def test_does_not_fire_when_the_float_result_has_another_reader():
    g = import_onnx(qdq_model("Conv", extra_reader=True))
    g2, res = apply(FoldQdq(), g)
    assert not res.changed and "QLinearConv" not in ops(g2)
    assert any("another reader or is a graph output" in n for n in res.notes)


def test_does_not_fire_on_a_weight_scale_along_k():
    m = qdq_model("MatMul", pow2=True, bias=False)
    for n in m.graph.node:
        if n.output == ["wd"]:
            n.attribute[0].i = 0  # per row of B (K): cannot leave the sum
    for init in m.graph.initializer:
        if init.name in ("sw", "zw"):
            arr = numpy_helper.to_array(init)
            init.CopyFrom(numpy_helper.from_array(np.resize(arr, 6), init.name))
    g = import_onnx(m)
    g2, res = apply(FoldQdq(), g)
    assert not res.changed and any("not the output columns" in n for n in res.notes)


def _move_model(op: str, same_scale: bool):
    s2 = 0.25 if same_scale else 0.5
    inits = [
        numpy_helper.from_array(np.float32(0.25), "s"),
        numpy_helper.from_array(np.uint8(7), "z"),
        numpy_helper.from_array(np.float32(s2), "s2"),
        numpy_helper.from_array(np.array([1, 12, 4], np.int64), "shape"),
    ]
    args = {
        "Reshape": (["d", "shape"], {}),
        "Transpose": (["d"], {"perm": [0, 2, 3, 1]}),
        "MaxPool": (["d"], {"kernel_shape": [2, 2]}),
        "Concat": (["d", "d"], {"axis": 1}),
        "Resize": (["d", "", "rs"], {"mode": "nearest"}),
        "ResizeLinear": (["d", "", "rs"], {"mode": "linear"}),
    }[op]
    inits.append(numpy_helper.from_array(np.array([1, 1, 2, 2], np.float32), "rs"))
    nodes = [
        helper.make_node("QuantizeLinear", ["x", "s", "z"], ["q"]),
        helper.make_node("DequantizeLinear", ["q", "s", "z"], ["d"]),
        helper.make_node(op.replace("Linear", ""), args[0], ["m"], **args[1]),
        helper.make_node("QuantizeLinear", ["m", "s2", "z"], ["mq"]),
        helper.make_node("DequantizeLinear", ["mq", "s2", "z"], ["y"]),
    ]
    g = helper.make_graph(
        nodes, "mv", [helper.make_tensor_value_info("x", F, [1, 3, 4, 4])],
        [helper.make_tensor_value_info("y", F, None)], inits,
    )  # fmt: skip
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 13)])


@pytest.mark.parametrize("op", ["Reshape", "Transpose", "MaxPool", "Concat", "Resize"])
def test_data_movement_runs_on_the_quantized_tensor_when_scales_agree(op):
    g = import_onnx(_move_model(op, True))
    g2, res = apply(FoldQdq(), g)
    assert ops(g2) == ["QuantizeLinear", op, "DequantizeLinear"]
    assert g2.values[g2.nodes[1].outputs[0]].dtype == np.uint8 and res.stats["num_int8_moves"] == 1
    for seed in (0, 1):
        f = {
            "x": (np.random.default_rng(seed).standard_normal((1, 3, 4, 4)) * 20).astype(np.float32)
        }
        np.testing.assert_array_equal(run_reference(g2, f)["y"], run_reference(g, f)["y"])
    verify(g2)


def test_data_movement_stays_float_when_scales_differ():
    g = import_onnx(_move_model("Transpose", False))
    g2, res = apply(FoldQdq(), g)
    assert not res.changed and ops(g2) == ops(g)
    assert any("another scale, zero point or dtype" in n for n in res.notes)


def test_a_linear_resize_stays_float():
    g = import_onnx(_move_model("ResizeLinear", True))
    g2, res = apply(FoldQdq(), g)
    assert not res.changed and any("nearest Resize" in n for n in res.notes)
