"""IR: text form round-trip, parser errors, verifier rules."""

from __future__ import annotations

import numpy as np
import onnx.parser
import pytest

from guard.compiler import Graph, import_onnx, parse_graph, print_graph, run_reference, verify
from guard.compiler.passes.verify import VerifyError
from guard.core.errors import ModelError


def small_graph() -> Graph:
    g = Graph("t")
    g.add_input("x", (2, 3), np.float32)
    g.add_constant("w", np.arange(12, dtype=np.float32).reshape(3, 4) / 7)
    g.add_constant("weird name", np.asarray([np.nan, -0.0, np.inf, 1e-40], np.float32))
    g.add_constant("big", np.ones((10, 10), np.float32))
    (mm,) = g.add_node("MatMul", ["x", "w"], [((2, 4), np.float32)], name="mm").outputs
    (y,) = g.add_node("Add", [mm, "weird name"], [((2, 4), np.float32)], outputs=["y"]).outputs
    g.add_node("Reshape", [y], [((8,), np.float32)], {"shape": [8]}, outputs=["out/1"])
    g.outputs = ["out/1"]
    return g


def test_print_parse_round_trips_exactly() -> None:
    g = small_graph()
    text = print_graph(g)
    assert 'const "weird name": f32[4] = [NaN, -0.0, Infinity, 9.99994610111476e-41]' in text
    assert "const big: f32[10,10] = external" in text
    assert "node mm: matmul_" in text
    g2 = parse_graph(text, weights={"big": np.ones((10, 10), np.float32)})
    assert print_graph(g2) == text
    verify(g2)
    x = np.random.default_rng(0).standard_normal((2, 3)).astype(np.float32)
    np.testing.assert_array_equal(
        run_reference(g, {"x": x})["out/1"], run_reference(g2, {"x": x})["out/1"]
    )


def test_parse_names_line_and_column_on_bad_text() -> None:
    with pytest.raises(ModelError, match="IR text line 2, column"):
        parse_graph('graph "g"\ninput x f32[1]\n')
    with pytest.raises(ModelError, match="constant 'big' is external but no weight"):
        parse_graph('graph "g"\nconst big: f32[100] = external\n')


def test_verifier_accepts_imported_graph_and_rejects_each_broken_rule() -> None:
    g = small_graph()
    verify(g)

    bad = g.clone()
    bad.nodes.reverse()  # uses before definitions: dangling or cyclic
    with pytest.raises(VerifyError, match="used before it is defined"):
        verify(bad)

    bad = g.clone()
    bad.nodes[1].outputs = [bad.nodes[0].outputs[0]]
    with pytest.raises(VerifyError, match="defined more than once"):
        verify(bad)

    bad = g.clone()
    bad.values["y"].shape = (2, 5)
    with pytest.raises(VerifyError, match="output 'y' is typed f32\\[2,5\\]"):
        verify(bad)

    bad = g.clone()
    bad.values["y"].dtype = np.dtype(np.float64)
    with pytest.raises(VerifyError, match="inputs give float32"):
        verify(bad)

    bad = g.clone()
    bad.outputs.append("nowhere")
    with pytest.raises(VerifyError, match="'nowhere' is never defined"):
        verify(bad)

    bad = g.clone()
    bad.nodes[0].op = "NoSuchOp"
    with pytest.raises(VerifyError, match="unknown op 'NoSuchOp'"):
        verify(bad)


def test_clone_is_independent() -> None:
    g = small_graph()
    c = g.clone()
    c.nodes[0].attrs["x"] = 1
    c.values["y"].shape = (9,)
    assert "x" not in g.nodes[0].attrs and g.values["y"].shape == (2, 4)


def test_imported_model_round_trips_through_text() -> None:
    m = onnx.parser.parse_model(
        """<ir_version: 8, opset_import: ["" : 17]>
        g (float[N, 4] x) => (float[N, 2] y) {
            w = Constant <value = float[4, 2] {1, 2, 3, 4, 5, 6, 7, 8}> ()
            s = Shape(x)
            t = MatMul(x, w)
            y = Relu(t)
        }"""
    )
    g = import_onnx(m, {"x": (3, 4)})
    verify(g)
    assert print_graph(parse_graph(print_graph(g))) == print_graph(g)


def test_low_precision_dtypes_round_trip_through_text() -> None:
    import ml_dtypes

    g = Graph("lp")
    g.add_input("x", (3,), ml_dtypes.bfloat16)
    g.add_constant("c", np.asarray([1.5, -2.0, 0.0078125], ml_dtypes.bfloat16))
    g.add_node("Add", ["x", "c"], [((3,), ml_dtypes.bfloat16)], outputs=["y"])
    g.add_node(
        "Cast",
        ["y"],
        [((3,), ml_dtypes.float8_e4m3fn)],
        {"to": "f8e4m3fn", "saturate": 1},
        outputs=["z"],
    )
    g.outputs = ["z"]
    verify(g)
    text = print_graph(g)
    assert "input x: bf16[3]" in text and "z: f8e4m3fn[3]" in text
    back = parse_graph(text)
    assert print_graph(back) == text
    x = np.asarray([1000.0, 1.0, -1.0], ml_dtypes.bfloat16)
    out = run_reference(back, {"x": x})["z"]
    assert out.dtype == ml_dtypes.float8_e4m3fn and float(out[0]) == 448.0  # saturated
