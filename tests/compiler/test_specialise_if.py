"""Specialisation with a guard (guard.compiler.frontend.specialise): an If whose branches
differ in shape compiles the rest of the model once per branch, the host dispatching on
the condition; each specialisation is one native partition with its convolutions
generated; equal to onnxruntime and the reference interpreter on both conditions, through
jit and through the artefact directory. Branches of equal shapes keep the host If with
its captures (the rule does not fire)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto as T
from onnx import helper as h
from onnx import numpy_helper as nh

from guard.backends import get_backend
from guard.backends.base import BuildRequest
from guard.compiler import import_onnx, optimize, parse_graph, print_graph, run_reference
from guard.compiler.codegen.build import jit
from guard.compiler.partition.plan import plan
from guard.core.errors import ModelError


def _vi(name: str, t: int, shape: list[int] | None) -> onnx.ValueInfoProto:
    return h.make_tensor_value_info(name, t, shape)


def shape_varying_model(else_kind: str = "valid", pool: bool = True) -> onnx.ModelProto:
    """y = conv1x1(mean_hw(cond ? relu(conv3x3_pad1(x)) : sigmoid(conv3x3(x)))) with cond =
    (mode == 1), ``mode`` an input: the then branch is [1,8,8,8], the else [1,8,6,6], the
    pooled continuation [1,4,1,1] on both. ``else_kind="broken"``: the else branch reshapes
    to a shape that does not divide at these sizes (it cannot be imported); ``pool=False``:
    no pooling, so the model's output differs in shape between the branches."""
    rng = np.random.default_rng(0)
    w1, w2 = (rng.standard_normal((8, 3, 3, 3)).astype(np.float32) for _ in range(2))
    w3 = rng.standard_normal((4, 8, 1, 1)).astype(np.float32)
    then_g = h.make_graph(
        [h.make_node("Conv", ["x", "w1"], ["t0"], pads=[1, 1, 1, 1]), h.make_node("Relu", ["t0"], ["t1"])],
        "then", [], [_vi("t1", T.FLOAT, None)],
    )  # fmt: skip
    else_nodes = [h.make_node("Conv", ["x", "w2"], ["e0"]), h.make_node("Sigmoid", ["e0"], ["e1"])]
    if else_kind == "broken":
        else_nodes.append(h.make_node("Reshape", ["e1", "bad_shape"], ["e2"]))
    else_out = "e2" if else_kind == "broken" else "e1"
    else_g = h.make_graph(else_nodes, "else", [], [_vi(else_out, T.FLOAT, None)])
    nodes = [
        h.make_node("Equal", ["mode", "one"], ["c"]),
        h.make_node("If", ["c"], ["y"], then_branch=then_g, else_branch=else_g, name="the_if"),
    ]
    if pool:
        nodes += [
            h.make_node("GlobalAveragePool", ["y"], ["p"]),
            h.make_node("Conv", ["p", "w3"], ["z"]),
        ]
    else:
        nodes.append(h.make_node("Relu", ["y"], ["z"]))
    inits = [
        nh.from_array(w1, "w1"),
        nh.from_array(w2, "w2"),
        nh.from_array(w3, "w3"),
        nh.from_array(np.array(1, np.int64), "one"),
        nh.from_array(np.array([5, -1, 7], np.int64), "bad_shape"),
    ]
    # x's spatial dims are bound at import (SHAPES), so onnxruntime loads the broken
    # variant and fails only when the broken branch runs.
    inputs = [_vi("x", T.FLOAT, [1, 3, "h", "w"]), _vi("mode", T.INT64, [])]
    g = h.make_graph(nodes, "spec", inputs, [_vi("z", T.FLOAT, None)], inits)
    return h.make_model(g, opset_imports=[h.make_opsetid("", 17)])


def _ort(model: onnx.ModelProto, feeds: dict[str, np.ndarray]) -> list[np.ndarray]:
    sess = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    return sess.run(None, feeds)


SHAPES = {"x": (1, 3, 8, 8)}
X = np.random.default_rng(2).standard_normal((1, 3, 8, 8)).astype(np.float32)
MODES = [np.array(1, np.int64), np.array(0, np.int64)]  # then, else


def test_the_top_graph_is_the_guard_and_one_if_over_the_specialisations() -> None:
    g = import_onnx(shape_varying_model(), SHAPES)
    assert [n.op for n in g.nodes] == ["Equal", "If"]  # the guard, then the dispatch
    node = g.nodes[1]
    spec = node.attrs["specialised"]
    assert spec["guard"] == "c" and "different shapes" in spec["why"]
    assert spec["branches"] == {"then_branch": "compiled", "else_branch": "compiled"}
    assert node.inputs == ["c", "x", "mode"] and node.outputs == ["z"]
    for attr in ("then_branch", "else_branch"):  # each a whole static model, no If left
        sub = node.attrs[attr]
        assert "If" not in sub.op_counts() and sub.op_counts()["Conv"] == 2
        assert sub.values["z"].shape == (1, 4, 1, 1)
    for mode in MODES:  # the reference interpreter runs it as onnxruntime does
        (want,) = _ort(shape_varying_model(), {"x": X, "mode": mode})
        got = run_reference(g, {"x": X, "mode": mode})["z"]
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)


def test_each_specialisation_is_one_native_partition_equal_to_onnxruntime() -> None:
    model = shape_varying_model()
    g0 = import_onnx(model, SHAPES)
    g, _ = optimize(g0, "O2")
    compiled = plan(g)
    (cf,) = compiled.partition_report["control_flow"]
    assert cf["node"] == "the_if" and cf["specialised"]["guard"] == "c"
    for sub in cf["subgraphs"].values():
        assert (sub["count"], sub["delegated_partitions"], sub["fallback_nodes"]) == (1, 1, 0)
    text = compiled.partition_text()
    assert "specialised: the model compiled once per branch, the host dispatching on c" in text
    rt, _ = jit(compiled)
    for mode in MODES:
        feeds = {"x": X, "mode": mode}
        (want,) = _ort(model, feeds)
        np.testing.assert_allclose(rt.run(feeds)["z"], want, rtol=1e-4, atol=1e-5)
        np.testing.assert_allclose(
            rt.run(feeds)["z"], run_reference(g0, feeds)["z"], rtol=1e-4, atol=1e-5
        )


def test_a_branch_that_cannot_be_imported_is_refused_at_run_time_only() -> None:
    model = shape_varying_model("broken")
    g = import_onnx(model, SHAPES)
    node = g.nodes[-1]
    assert "else_branch" not in node.attrs and "then_branch" in node.attrs
    assert node.attrs["specialised"]["branches"]["else_branch"] == "refused"
    assert "Reshape" in node.attrs["specialised"]["refused"]["else_branch"]
    rt, _ = jit(plan(optimize(g, "O2")[0]))
    feeds = {"x": X, "mode": MODES[0]}
    np.testing.assert_allclose(rt.run(feeds)["z"], _ort(model, feeds)[0], rtol=1e-4, atol=1e-5)
    with pytest.raises(ModelError, match="condition is False at run time, and its else_branch"):
        rt.run({"x": X, "mode": MODES[1]})
    with pytest.raises(ort.capi.onnxruntime_pybind11_state.Fail, match="Reshape"):  # as does ort
        _ort(model, {"x": X, "mode": MODES[1]})


def test_outputs_that_differ_between_specialisations_are_refused_naming_them() -> None:
    with pytest.raises(ModelError) as exc:
        import_onnx(shape_varying_model(pool=False), SHAPES)
    msg = str(exc.value)
    assert "If node 'the_if'" in msg and "output 'z' is f32[1,8,8,8]" in msg, msg
    assert "f32[1,8,6,6] in else_branch" in msg and "\n" not in msg


def test_branches_of_equal_shapes_keep_the_host_if_with_captures() -> None:
    """The rule does not fire: the If stays one node reading x, its branches only."""
    model = shape_varying_model()
    for n in model.graph.node:  # give the else branch padding: equal shapes
        if n.op_type == "If":
            n.attribute[0].g.node[0].attribute.append(h.make_attribute("pads", [1, 1, 1, 1]))
    g = import_onnx(model, SHAPES)
    (node,) = [n for n in g.nodes if n.op == "If"]
    assert "specialised" not in node.attrs and node.outputs == ["y"]
    assert "GlobalAveragePool" in g.op_counts()  # the continuation stays in the top graph
    (cf,) = plan(optimize(g, "O2")[0]).partition_report["control_flow"]
    assert "specialised" not in cf


def test_the_specialised_graph_round_trips_through_text_and_the_artefact(tmp_path: Path) -> None:
    g = import_onnx(shape_varying_model("broken"), SHAPES)
    text = print_graph(g)
    weights = {k: c.data for k, c in g.nodes[-1].attrs["then_branch"].constants.items()}
    assert print_graph(parse_graph(text, weights=weights)) == text
    onnx.save(shape_varying_model(), tmp_path / "m.onnx")
    out = tmp_path / "art"
    out.mkdir()
    backend = get_backend("bundled")
    backend.build(BuildRequest(tmp_path / "m.onnx", SHAPES, "host", "host", 1, out))
    sess = backend.load(out, threads=1)
    assert "specialised: the model once per branch, guard c" in sess.partitions().how
    for mode in MODES:
        (z,) = sess.run({"x": X, "mode": mode})
        want = _ort(shape_varying_model(), {"x": X, "mode": mode})[0]
        np.testing.assert_allclose(z, want, rtol=1e-4, atol=1e-5)
