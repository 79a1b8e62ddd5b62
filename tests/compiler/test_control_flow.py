"""Control flow (If, Loop): the importer's closed bodies, the reference kernels against
onnxruntime, and the bundled backend running the If/Loop on the host with each branch or
loop body compiled as its own native partition (jit and the artefact directory)."""

from __future__ import annotations

import subprocess
import sys
from dataclasses import replace
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
from guard.backends.bundled import generated_only
from guard.compiler import import_onnx, optimize, parse_graph, print_graph, run_reference
from guard.compiler.codegen.build import jit
from guard.compiler.partition.plan import plan
from guard.compiler.runtime.artefact import load_artefact
from guard.core.errors import ModelError


def _vi(name: str, t: int, shape: list[int] | None) -> onnx.ValueInfoProto:
    return h.make_tensor_value_info(name, t, shape)


def if_model(same_shapes: bool = True) -> onnx.ModelProto:
    """z = 2 * (sum(x) > 0 ? relu(conv(x, w1)) : sigmoid(conv(x, w2))); the branches read
    the outer x and weights. With ``same_shapes=False`` the else branch has no padding."""
    rng = np.random.default_rng(0)
    w1, w2 = (rng.standard_normal((8, 3, 3, 3)).astype(np.float32) for _ in range(2))
    then_g = h.make_graph(
        [h.make_node("Conv", ["x", "w1"], ["t0"], pads=[1, 1, 1, 1]), h.make_node("Relu", ["t0"], ["t1"])],
        "then", [], [_vi("t1", T.FLOAT, None)],
    )  # fmt: skip
    pads = [1, 1, 1, 1] if same_shapes else [0, 0, 0, 0]
    else_g = h.make_graph(
        [h.make_node("Conv", ["x", "w2"], ["e0"], pads=pads), h.make_node("Sigmoid", ["e0"], ["e1"])],
        "else", [], [_vi("e1", T.FLOAT, None)],
    )  # fmt: skip
    nodes = [
        h.make_node("ReduceSum", ["x"], ["s"], keepdims=0),
        h.make_node("Greater", ["s", "zero"], ["c"]),
        h.make_node("If", ["c"], ["y"], then_branch=then_g, else_branch=else_g, name="the_if"),
        h.make_node("Add", ["y", "y"], ["z"]),
    ]
    inits = [
        nh.from_array(w1, "w1"),
        nh.from_array(w2, "w2"),
        nh.from_array(np.array(0, np.float32), "zero"),
    ]
    g = h.make_graph(
        nodes, "ifm", [_vi("x", T.FLOAT, [1, 3, 8, 8])], [_vi("z", T.FLOAT, None)], inits
    )
    return h.make_model(g, opset_imports=[h.make_opsetid("", 17)])


def loop_model() -> onnx.ModelProto:
    """Five steps of h = tanh(h @ w) from x, each step's sum stacked; y = relu(h)."""
    w = (np.random.default_rng(1).standard_normal((16, 16)) * 0.3).astype(np.float32)
    body = h.make_graph(
        [
            h.make_node("MatMul", ["h_in", "w"], ["m"]),
            h.make_node("Tanh", ["m"], ["h_out"]),
            h.make_node("Identity", ["cond_in"], ["cond_out"]),
            h.make_node("ReduceSum", ["h_out"], ["scan_out"], keepdims=0),
        ],
        "body",
        [_vi("i", T.INT64, []), _vi("cond_in", T.BOOL, []), _vi("h_in", T.FLOAT, None)],
        [_vi("cond_out", T.BOOL, []), _vi("h_out", T.FLOAT, None), _vi("scan_out", T.FLOAT, None)],
    )
    nodes = [
        h.make_node("Loop", ["M", "", "x"], ["h", "scans"], body=body, name="the_loop"),
        h.make_node("Relu", ["h"], ["y"]),
    ]
    inits = [nh.from_array(w, "w"), nh.from_array(np.array(5, np.int64), "M")]
    outs = [_vi("y", T.FLOAT, None), _vi("scans", T.FLOAT, None)]
    g = h.make_graph(nodes, "loopm", [_vi("x", T.FLOAT, [4, 16])], outs, inits)
    return h.make_model(g, opset_imports=[h.make_opsetid("", 17)])


def _ort(model: onnx.ModelProto, feeds: dict[str, np.ndarray]) -> list[np.ndarray]:
    sess = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    return sess.run(None, feeds)


# x with a positive and a negative sum: both branches run
IF_FEEDS = [
    np.abs(np.random.default_rng(2).standard_normal((1, 3, 8, 8))).astype(np.float32) * s
    for s in (1, -1)
]
LOOP_FEEDS = [np.random.default_rng(s).standard_normal((4, 16)).astype(np.float32) for s in (3, 4)]
CASES = [(if_model, IF_FEEDS), (loop_model, LOOP_FEEDS)]


@pytest.mark.parametrize(("make", "inputs"), CASES, ids=["if", "loop"])
def test_reference_kernels_match_onnxruntime(make, inputs) -> None:
    model = make()
    g = import_onnx(model)
    assert {n.op for n in g.nodes} & {"If", "Loop"}
    for x in inputs:
        ref = run_reference(g, {"x": x})
        for o, want in zip(g.outputs, _ort(model, {"x": x}), strict=True):
            np.testing.assert_allclose(ref[o], want, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize(("make", "inputs"), CASES, ids=["if", "loop"])
def test_bundled_runs_control_flow_on_the_host_and_each_body_native(make, inputs) -> None:
    model = make()
    g, _ = optimize(import_onnx(model), "O2")
    compiled = plan(g)
    rep = compiled.partition_report
    host = [n.op for n in compiled.view.nodes if n.op in ("If", "Loop")]
    assert rep["fallback_nodes"] == len(host) == 1, compiled.partition_text()
    (cf,) = rep["control_flow"]
    assert cf["backend"] == "cpu" and cf["node"] in ("the_if", "the_loop")
    assert set(cf["subgraphs"]) == (
        {"then_branch", "else_branch"} if make is if_model else {"body"}
    )
    for sub in cf["subgraphs"].values():  # one native partition per branch or body
        assert (sub["count"], sub["delegated_partitions"], sub["fallback_nodes"]) == (1, 1, 0)
    assert f"control flow: {cf['node']}" in compiled.partition_text()
    rt, _ = jit(compiled)
    for x in inputs:
        out = rt.run({"x": x})
        for o, want in zip(g.outputs, _ort(model, {"x": x}), strict=True):
            np.testing.assert_allclose(out[o], want, rtol=1e-4, atol=1e-5)


def test_a_constant_condition_inlines_its_branch() -> None:
    """An If on shape arithmetic (exporters' "squeeze if the batch is 1") is decided at import."""
    then_g = h.make_graph(
        [h.make_node("Squeeze", ["x", "ax"], ["t"])], "t", [], [_vi("t", T.FLOAT, None)]
    )
    else_g = h.make_graph(
        [h.make_node("Identity", ["x"], ["e"])], "e", [], [_vi("e", T.FLOAT, None)]
    )
    nodes = [
        h.make_node("Shape", ["x"], ["shp"]),
        h.make_node("Gather", ["shp", "zero"], ["n"]),
        h.make_node("Equal", ["n", "one"], ["c"]),
        h.make_node("If", ["c"], ["y"], then_branch=then_g, else_branch=else_g),
    ]
    inits = [
        nh.from_array(np.array(v, np.int64), k) for k, v in (("zero", 0), ("one", 1), ("ax", [0]))
    ]
    g = h.make_graph(nodes, "sq", [_vi("x", T.FLOAT, [1, 5])], [_vi("y", T.FLOAT, None)], inits)
    model = h.make_model(g, opset_imports=[h.make_opsetid("", 17)])
    ir = import_onnx(model)
    assert "If" not in ir.op_counts() and ir.values["y"].shape == (5,)
    x = np.arange(5, dtype=np.float32).reshape(1, 5)
    np.testing.assert_array_equal(run_reference(ir, {"x": x})["y"], _ort(model, {"x": x})[0])


def test_bundled_artefact_runs_its_compiled_branches(tmp_path: Path) -> None:
    onnx.save(if_model(), tmp_path / "m.onnx")
    out = tmp_path / "art"
    out.mkdir()
    backend = get_backend("bundled")
    backend.build(BuildRequest(tmp_path / "m.onnx", {}, "host", "host", 1, out))
    assert sorted(p.name for p in (out / "sub").iterdir()) == ["0_else_branch", "1_then_branch"]
    sess = backend.load(out, threads=1)
    parts = sess.partitions()
    assert parts.fallback_nodes == 1
    assert "control flow: the_if (If) on the host calls else_branch: 1 partition(s)" in parts.how
    # the If's partition names the graphs it calls: each branch one native partition
    (host,) = [d for d in parts.details if d["backend"] == "cpu"]
    assert host["ops"] == {"If": 1}
    assert host["subgraphs"] == {
        "else_branch": {"count": 1, "fallback_nodes": 0},
        "then_branch": {"count": 1, "fallback_nodes": 0},
    }
    assert all("subgraphs" not in d for d in parts.details if d["backend"] != "cpu")
    # no numpy kernel runs (the If on the host, its branches generated): no BLAS limit a call
    assert sess.generated_only
    art = load_artefact(out)
    assert generated_only(art) and not generated_only(load_artefact(out, native=False))
    other = [{**d, "ops": {"Einsum": 1}} if d["backend"] == "cpu" else d
             for d in art.partitions["partitions"]]  # fmt: skip
    assert not generated_only(replace(art, partitions={**art.partitions, "partitions": other}))
    for x in IF_FEEDS:
        (z,) = sess.run({"x": x})
        np.testing.assert_allclose(z, _ort(if_model(), {"x": x})[0], rtol=1e-4, atol=1e-5)
    from guard.emulate.bundled import load_emulated

    with pytest.raises(ModelError, match="control flow .* the emulator runs one generated object"):
        load_emulated(out, threads=1)  # refused before any emulator starts
    (out / "sub" / "0_else_branch" / "artefact.json").write_text("{}")
    with pytest.raises(ModelError, match="branch's artefact"):
        backend.load(out, threads=1)


def test_branches_of_different_shapes_are_refused_naming_the_node(tmp_path: Path) -> None:
    onnx.save(if_model(same_shapes=False), tmp_path / "m.onnx")
    r = subprocess.run(
        [sys.executable, "-m", "guard.cli.main", "partition", str(tmp_path / "m.onnx")],
        capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert r.returncode == 2, r.stderr
    lines = [ln for ln in r.stderr.splitlines() if ln.strip()]
    assert len(lines) == 1 and "Traceback" not in r.stderr
    assert "If node 'the_if'" in lines[0] and "different shapes" in lines[0]


def test_subgraphs_round_trip_through_the_text_form() -> None:
    g = import_onnx(loop_model())
    text = print_graph(g)
    body = g.nodes[0].attrs["body"]
    weights = {k: c.data for graph in (g, body) for k, c in graph.constants.items()}
    back = parse_graph(text, weights=weights)
    assert print_graph(back) == text
    x = LOOP_FEEDS[0]
    ref, got = run_reference(g, {"x": x}), run_reference(back, {"x": x})
    for o in g.outputs:
        np.testing.assert_array_equal(got[o], ref[o])


def test_a_while_loop_evaluates_its_condition_on_the_host() -> None:
    """h = h / 2 while sum(|h|) > 1 (at most 100 steps): the body's condition output decides."""
    body = h.make_graph(
        [
            h.make_node("Mul", ["h_in", "half"], ["h_out"]),
            h.make_node("Abs", ["h_out"], ["a"]),
            h.make_node("ReduceSum", ["a"], ["s"], keepdims=0),
            h.make_node("Greater", ["s", "one"], ["cond_out"]),
        ],
        "body",
        [_vi("i", T.INT64, []), _vi("cond_in", T.BOOL, []), _vi("h_in", T.FLOAT, None)],
        [_vi("cond_out", T.BOOL, []), _vi("h_out", T.FLOAT, None)],
    )
    inits = [nh.from_array(np.array(v, dt), k) for k, v, dt in
             (("half", 0.5, np.float32), ("one", 1.0, np.float32), ("M", 100, np.int64), ("go", True, np.bool_))]  # fmt: skip
    g = h.make_graph(
        [h.make_node("Loop", ["M", "go", "x"], ["y"], body=body, name="while")],
        "whilem", [_vi("x", T.FLOAT, [2, 8])], [_vi("y", T.FLOAT, None)], inits,
    )  # fmt: skip
    model = h.make_model(g, opset_imports=[h.make_opsetid("", 17)])
    ir = import_onnx(model)
    rt, _ = jit(plan(optimize(ir, "O2")[0]))
    for scale in (0.01, 1.0, 50.0):  # 1, a few and many iterations
        x = (np.random.default_rng(5).standard_normal((2, 8)) * scale).astype(np.float32)
        (want,) = _ort(model, {"x": x})
        np.testing.assert_array_equal(run_reference(ir, {"x": x})["y"], want)
        np.testing.assert_array_equal(rt.run({"x": x})["y"], want)


@pytest.mark.parametrize(
    "node",
    [
        h.make_node("If", ["x"], ["y"]),
        h.make_node("Loop", ["x", "x", "x"], ["y"], body=h.make_graph([], "b", [], [])),
    ],
    ids=["if-without-branches", "loop-body-of-another-arity"],
)
def test_malformed_control_flow_is_a_one_line_model_error(node) -> None:
    g = h.make_graph([node], "m", [_vi("x", T.FLOAT, [2])], [_vi("y", T.FLOAT, [2])])
    with pytest.raises(
        ModelError, match=rf"{node.op_type} node 'y': malformed {node.op_type}"
    ) as exc:
        import_onnx(h.make_model(g, opset_imports=[h.make_opsetid("", 17)]))
    assert "\n" not in str(exc.value)
