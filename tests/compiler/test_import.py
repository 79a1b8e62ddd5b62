"""ONNX import: the ops transformer exporters use (vs onnxruntime), and every clear error."""

from __future__ import annotations

import numpy as np
import onnx
import onnx.parser
import pytest
from onnx import helper

from guard.compiler import import_onnx, optimize, run_reference, verify
from guard.core.errors import ModelError, UnsupportedOpError

ENCODER = """<ir_version: 9, opset_import: ["" : 20]>
enc (float[B, S, 8] x, int64[B, S] ids, bool[B, S] mask) => (float[B, S, 8] y, float[B, S, 4] parts, int64[B, S] pos) {
    emb = Constant <value = float[10, 8] {
        0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8, 0.9, 1.0, -0.1, -0.2, -0.3, -0.4, -0.5, -0.6,
        -0.7, -0.8, -0.9, -1.0, 0.15, 0.25, 0.35, 0.45, 0.55, 0.65, 0.75, 0.85, 0.95, 1.05,
        -0.15, -0.25, -0.35, -0.45, -0.55, -0.65, -0.75, -0.85, 0.05, 0.01, 0.02, 0.03, 0.04,
        0.06, 0.07, 0.08, 0.09, 0.11, 0.12, 0.13, 0.14, 0.16, 0.17, 0.18, 0.19, 0.21, 0.22,
        0.23, 0.24, 0.26, 0.27, 0.28, 0.29, 0.31, 0.32, 0.33, 0.34, 0.36, 0.37, 0.38, 0.39,
        0.41, 0.42, 0.43, 0.44, 0.46, 0.47, 0.48, 0.49, 0.51}> ()
    g = Gather <axis = 0> (emb, ids)
    h = Add(x, g)
    shp = Shape(h)
    b = Gather <axis = 0> (shp, zero)
    zero = Constant <value = int64 {0}> ()
    one = Constant <value = int64 {1}> ()
    s = Gather <axis = 0> (shp, one)
    b1 = Unsqueeze(b, zero1)
    zero1 = Constant <value = int64[1] {0}> ()
    s1 = Unsqueeze(s, zero1)
    heads = Constant <value = int64[2] {2, 4}> ()
    newshape = Concat <axis = 0> (b1, s1, heads)
    q = Reshape(h, newshape)
    qt = Transpose <perm = [0, 2, 1, 3]> (q)
    kt = Transpose <perm = [0, 2, 3, 1]> (q)
    sc = MatMul(qt, kt)
    scale = Constant <value = float {0.5}> ()
    sc2 = Mul(sc, scale)
    mf = Cast <to = 1> (mask)
    m1 = Unsqueeze(mask, axes_m)
    axes_m = Constant <value = int64[2] {1, 2}> ()
    m2 = Expand(m1, shp4)
    shp4 = Constant <value = int64[4] {1, 2, 1, 1}> ()
    neg = Constant <value = float {-10000}> ()
    sc3 = Where(m2, sc2, neg)
    p = Softmax <axis = -1> (sc3)
    ctx = MatMul(p, qt)
    ct = Transpose <perm = [0, 2, 1, 3]> (ctx)
    flat = Reshape(ct, shp3)
    shp3 = Constant <value = int64[3] {0, 0, -1}> ()
    gamma = Constant <value = float[8] {1, 1, 1, 1, 2, 2, 2, 2}> ()
    beta = Constant <value = float[8] {0, 0, 0, 0, 1, 1, 1, 1}> ()
    ln = LayerNormalization <axis = -1, epsilon = 1e-5> (flat, gamma, beta)
    ge = Gelu(ln)
    two = Constant <value = float {2}> ()
    pw = Pow(ge, two)
    sq = Sqrt(pw)
    rm = ReduceMean <keepdims = 1> (sq, axes_last)
    axes_last = Constant <value = int64[1] {-1}> ()
    y0 = Sub(sq, rm)
    y = Add(y0, mf3)
    mf3 = Unsqueeze(mf, axes_last)
    sl = Slice(y, st, en, ax)
    st = Constant <value = int64[1] {2}> ()
    en = Constant <value = int64[1] {100}> ()
    ax = Constant <value = int64[1] {2}> ()
    a, parts = Split <axis = 2> (sl, sp)
    sp = Constant <value = int64[2] {2, 4}> ()
    pos = CumSum(ids, one)
}"""


def _sorted_model(text: str) -> onnx.ModelProto:
    return onnx.parser.parse_model(text)


def test_transformer_ops_from_an_exporter_match_onnxruntime() -> None:
    import onnxruntime as ort

    model = _sorted_model(ENCODER)
    shapes = {"x": (2, 3, 8), "ids": (2, 3), "mask": (2, 3)}
    g = import_onnx(model, shapes)
    verify(g)
    rng = np.random.default_rng(0)
    feeds = {
        "x": rng.standard_normal((2, 3, 8)).astype(np.float32),
        "ids": rng.integers(0, 10, (2, 3)).astype(np.int64),
        "mask": rng.integers(0, 2, (2, 3)).astype(bool),
    }
    sess = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    ref = sess.run(None, feeds)
    for level in ("O0", "O2"):
        out = run_reference(optimize(g, level, verify_each=True)[0], feeds)
        for (name, ours), theirs in zip(out.items(), ref, strict=True):
            np.testing.assert_allclose(
                ours, theirs, rtol=1e-4, atol=1e-5, err_msg=f"{level} {name}"
            )
    # Shape arithmetic folded into the Reshape's attribute: no Shape/Gather/Concat survive.
    ops = [n.op for n in optimize(g, "O2")[0].nodes]
    assert "Concat" not in ops and ops.count("Gather") == 1


def _model(
    nodes: list, inputs: list, outputs: list, opset: int = 17, inits: list | None = None
) -> onnx.ModelProto:
    g = helper.make_graph(nodes, "m", inputs, outputs, inits or [])
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", opset)])


F = onnx.TensorProto.FLOAT
vi = helper.make_tensor_value_info


def test_unsupported_op_names_op_domain_opset_and_node() -> None:
    m = _model(
        [helper.make_node("FancyOp", ["x"], ["y"], name="n7", domain="com.acme")],
        [vi("x", F, [2])],
        [vi("y", F, [2])],
    )
    m.opset_import.append(helper.make_opsetid("com.acme", 1))
    with pytest.raises(
        UnsupportedOpError, match=r"op FancyOp \(domain 'com.acme', opset 17, node 'n7'\)"
    ):
        import_onnx(m)


def test_unbound_dynamic_dim_is_named() -> None:
    m = _model(
        [helper.make_node("Relu", ["x"], ["y"])],
        [vi("x", F, ["batch", 4])],
        [vi("y", F, ["batch", 4])],
    )
    with pytest.raises(ModelError, match=r"input 'x' dim 0 \('batch'\) is dynamic and unbound"):
        import_onnx(m)
    assert import_onnx(m, {"x": (3, 4)}).values["y"].shape == (3, 4)


def test_data_dependent_reshape_is_named() -> None:
    m = _model(
        [helper.make_node("Reshape", ["x", "s"], ["y"], name="reshape_7")],
        [vi("x", F, [2, 3]), vi("s", onnx.TensorProto.INT64, [2])],
        [vi("y", F, [3, 2])],
    )
    with pytest.raises(
        ModelError,
        match=r"Reshape node 'reshape_7': its target shape \('s'\) depends on tensor data",
    ):
        import_onnx(m)


def test_cycle_is_an_error() -> None:
    m = _model(
        [
            helper.make_node("Relu", ["b"], ["a"], name="r1"),
            helper.make_node("Neg", ["a"], ["b"], name="r2"),
        ],
        [vi("x", F, [2])],
        [vi("a", F, [2])],
    )
    with pytest.raises(ModelError, match=r"cycle through 2 nodes \(Relu 'r1', Neg 'r2'\)"):
        import_onnx(m)


def test_cycle_names_only_the_nodes_on_it() -> None:
    # r3 reads the cycle but is not on it: it is not named, nor counted.
    m = _model(
        [
            helper.make_node("Relu", ["b"], ["a"], name="r1"),
            helper.make_node("Neg", ["a"], ["b"], name="r2"),
            helper.make_node("Abs", ["a"], ["c"], name="r3"),
        ],
        [vi("x", F, [2])],
        [vi("c", F, [2])],
    )
    with pytest.raises(ModelError, match=r"cycle through 2 nodes \(Relu 'r1', Neg 'r2'\)"):
        import_onnx(m)


def test_a_bound_shape_must_keep_the_models_fixed_dims() -> None:
    m = _model(
        [helper.make_node("Relu", ["x"], ["y"])],
        [vi("x", F, ["batch", 4])],
        [vi("y", F, ["batch", 4])],
    )
    with pytest.raises(ModelError, match=r"inputs.x.shape\[1\]: the model fixes this dim to 4"):
        import_onnx(m, {"x": (3, 5)})
    with pytest.raises(ModelError, match=r"inputs.xx: the model has no input named 'xx'"):
        import_onnx(m, {"xx": (3, 4)})


def test_an_input_without_a_shape_must_be_bound() -> None:
    m = _model(
        [helper.make_node("Relu", ["x"], ["y"])],
        [helper.make_tensor_value_info("x", F, None)],
        [vi("y", F, [2, 3])],
    )
    with pytest.raises(ModelError, match=r"input 'x' declares no shape"):
        import_onnx(m)
    assert import_onnx(m, {"x": (2, 3)}).values["y"].shape == (2, 3)


def test_if_branches_of_different_shapes_are_refused_naming_the_node() -> None:
    then_b = helper.make_graph(
        [helper.make_node("Identity", ["x"], ["o"])], "t", [], [vi("o", F, None)]
    )
    else_b = helper.make_graph(
        [helper.make_node("ReduceSum", ["x"], ["p"], keepdims=0)], "e", [], [vi("p", F, None)]
    )
    m = _model(
        [helper.make_node("If", ["c"], ["y"], name="if_1", then_branch=then_b, else_branch=else_b)],
        [vi("c", onnx.TensorProto.BOOL, []), vi("x", F, [2])],
        [vi("y", F, None)],
    )
    with pytest.raises(ModelError, match=r"If node 'if_1'.*different shapes: output 0 is f32\[2\]"):
        import_onnx(m)


def test_scan_is_not_compiled_and_says_so() -> None:
    body = helper.make_graph(
        [helper.make_node("Identity", ["s"], ["o"])], "b", [vi("s", F, [2])], [vi("o", F, [2])]
    )
    m = _model(
        [helper.make_node("Scan", ["x"], ["y"], name="scan_1", body=body, num_scan_inputs=1)],
        [vi("x", F, [3, 2])],
        [vi("y", F, [3, 2])],
    )
    with pytest.raises(
        UnsupportedOpError,
        match=r"control flow op Scan \(node 'scan_1'\) is not compiled.*onnxruntime backend",
    ):
        import_onnx(m)


def test_messages_are_one_line() -> None:
    m = _model([helper.make_node("Relu", ["x"], ["y"])], [vi("x", F, ["n"])], [vi("y", F, ["n"])])
    with pytest.raises(ModelError) as exc:
        import_onnx(m)
    assert "\n" not in str(exc.value)
