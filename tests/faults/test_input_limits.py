"""Limits before work: subgraph nesting, node count and tensor bytes are checked from the
model's declared shapes before anything is built (exit 2 naming the node or tensor and the
limit), with defaults scaled to the host's memory and a suite ``limits:`` block over them."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper
from run_helpers import FAST_MEASURE, write_suite

from guard.cli.main import main
from guard.core.errors import ModelError
from guard.suite import load_suite
from guard.suite.limits import MIB, Limits, default_limits
from guard.suite.model import load_model

GIB = 1024**3


def nested_if(depth: int) -> onnx.ModelProto:
    """y = x through ``depth`` If nodes, each then-branch holding the next If."""

    def body(level: int, out: str) -> onnx.GraphProto:
        if level == 0:
            nodes = [helper.make_node("Identity", ["x"], [out], name=f"id_{out}")]
        else:
            nodes = [
                helper.make_node(
                    "If",
                    ["c"],
                    [out],
                    name=f"if_{level}",
                    then_branch=body(level - 1, f"t{level}"),
                    else_branch=body(0, f"e{level}"),
                )
            ]
        return helper.make_graph(
            nodes, f"g_{out}", [], [helper.make_tensor_value_info(out, TensorProto.FLOAT, [1, 4])]
        )

    g = body(depth, "y")
    top = helper.make_graph(
        list(g.node),
        "top",
        [
            helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 4]),
            helper.make_tensor_value_info("c", TensorProto.BOOL, []),
        ],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 4])],
    )
    return helper.make_model(top, opset_imports=[helper.make_opsetid("", 17)])


def relu_chain(n: int) -> onnx.ModelProto:
    names = ["x", *(f"r{i}" for i in range(n - 1)), "y"]
    nodes = [
        helper.make_node("Relu", [names[i]], [names[i + 1]], name=f"relu{i}") for i in range(n)
    ]
    g = helper.make_graph(
        nodes,
        "chain",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 4])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 4])],
    )
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])


def expand_to(shape: list[int | str], in_dims: list[int | str]) -> onnx.ModelProto:
    """y = Expand(x, shape): a small input, an output as large as ``shape`` declares."""
    concrete = [d if isinstance(d, int) else 1 for d in shape]
    g = helper.make_graph(
        [helper.make_node("Expand", ["x", "s"], ["y"], name="expand")],
        "expand",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, in_dims)],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, shape)],
        [numpy_helper.from_array(np.array(concrete, "int64"), "s")],
    )
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])


def _run(tmp_path: Path, model: onnx.ModelProto, inputs: str, limits: str = "") -> Path:
    onnx.save(model, tmp_path / "m.onnx")
    return write_suite(
        tmp_path,
        f"""
    schema_version: 1
    suite: limits
    {limits}
    defaults:
      backends: [onnxruntime]
      measure: {FAST_MEASURE}
    models:
      - name: m
        source: m.onnx
        inputs: {inputs}
    """,
    )


def _refused(suite: Path, workdir: Path, capsys, *words: str) -> str:
    code = main(["run", str(suite), "--no-track"])
    err = capsys.readouterr().err
    assert code == 2, err
    line = next(x for x in err.splitlines() if x.startswith("guard: error:"))
    assert all(w in line for w in words), line
    # refused before any build: no artefact and no golden was made
    assert not (workdir / ".guard" / "artefacts").exists()
    assert not (suite.parent / "goldens").exists()
    return line


def test_defaults_scale_with_host_memory():
    assert default_limits(24 * GIB) == Limits(768 * MIB, 8, 393_216)
    assert default_limits(1 * GIB) == Limits(64 * MIB, 8, 50_000)
    assert default_limits(1024 * GIB) == Limits(2 * GIB, 8, 2_000_000)
    assert default_limits().max_tensor_bytes <= 2 * GIB


def test_deep_subgraphs_are_refused_by_default(tmp_path, workdir, capsys):
    suite = _run(tmp_path, nested_if(12), "{x: {shape: [1, 4]}, c: {shape: [], dist: ones}}")
    _refused(suite, workdir, capsys, "m.onnx", "'if_4' (If)", "9 deep", "limits.max_subgraph_depth")


def test_the_suite_may_raise_the_depth(tmp_path):
    onnx.save(nested_if(12), tmp_path / "m.onnx")
    model = load_model(tmp_path / "m.onnx", Limits(GIB, 12, 1000))
    assert model.graph.node[0].op_type == "If"
    with pytest.raises(ModelError, match="max_subgraph_depth"):
        load_model(tmp_path / "m.onnx", Limits(GIB, 11, 1000))


def test_too_many_nodes_are_refused(tmp_path, workdir, capsys):
    suite = _run(tmp_path, relu_chain(60), "{x: {shape: [1, 4]}}", "limits: {max_nodes: 50}")
    _refused(suite, workdir, capsys, "more than 50 nodes", "limits.max_nodes")


def test_nodes_inside_subgraphs_count(tmp_path):
    onnx.save(nested_if(12), tmp_path / "m.onnx")  # 12 If + 13 Identity
    with pytest.raises(ModelError, match="more than 24 nodes"):
        load_model(tmp_path / "m.onnx", Limits(GIB, 20, 24))
    load_model(tmp_path / "m.onnx", Limits(GIB, 20, 25))


def test_a_declared_output_past_the_default_is_refused(tmp_path, workdir, capsys):
    # 4 GiB of float32: past the default on any host (at most 2 GiB)
    suite = _run(tmp_path, expand_to([1024, 1024, 1024], [1]), "{x: {shape: [1]}}")
    _refused(
        suite,
        workdir,
        capsys,
        "output 'y'",
        "[1024, 1024, 1024]",
        "4.00 GiB",
        "limits.max_tensor_bytes",
    )


def test_an_output_sized_by_a_bound_symbol_is_checked(tmp_path, workdir, capsys):
    suite = _run(
        tmp_path,
        expand_to(["n", 4096], ["n", 1]),
        "{x: {shape: [1024, 1]}}",
        "limits: {max_tensor_bytes: 1048576}",
    )
    _refused(suite, workdir, capsys, "output 'y'", "[1024, 4096]", "16.0 MiB", "1.0 MiB")


def test_an_input_past_the_limit_is_refused(tmp_path, workdir, capsys):
    suite = _run(
        tmp_path,
        expand_to(["n", 4], ["n", 4]),
        "{x: {shape: [100000, 4]}}",
        "limits: {max_tensor_bytes: 1048576}",
    )
    _refused(suite, workdir, capsys, "input 'x'", "[100000, 4]", "limits.max_tensor_bytes")


def test_a_model_may_override_the_suite_limits(tmp_path):
    p = tmp_path / "s.yaml"
    p.write_text(
        "schema_version: 1\nsuite: s\nlimits: {max_nodes: 10, max_tensor_bytes: 2048}\n"
        "models:\n  - {name: a, source: a.onnx}\n"
        "  - {name: b, source: b.onnx, limits: {max_nodes: 99}}\n"
    )
    a, b = load_suite(p).models
    host = default_limits()
    assert a.limits == Limits(2048, host.max_subgraph_depth, 10)
    assert b.limits == Limits(2048, host.max_subgraph_depth, 99)


@pytest.mark.parametrize(
    ("block", "words"),
    [
        ("{max_nodes: 0}", "limits.max_nodes: must be > 0"),
        ("{max_nodes: 1.5}", "limits.max_nodes: expected an integer"),
        ("{max_tensor_bytes: 1e99}", "out of range"),
        ("{max_depth: 3}", "Did you mean 'max_subgraph_depth'"),
    ],
)
def test_a_bad_limits_block_is_refused(tmp_path, block, words):
    p = tmp_path / "s.yaml"
    p.write_text(
        f"schema_version: 1\nsuite: s\nlimits: {block}\nmodels: [{{name: a, source: a.onnx}}]\n"
    )
    with pytest.raises(Exception, match=words.replace("(", r"\(").replace(")", r"\)")):
        load_suite(p)
