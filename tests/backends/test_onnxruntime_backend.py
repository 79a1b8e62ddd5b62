"""The onnxruntime backend: recorded session options, partitions, memory, clear errors."""

from __future__ import annotations

import json

import numpy as np
import onnx
import pytest
from onnx import helper

from guard.backends import get_backend
from guard.backends.base import BuildRequest
from guard.core.errors import ModelError, UnsupportedOpError


def _req(model, out, **options):
    out.mkdir()
    return BuildRequest(
        model_path=model,
        input_shapes={"x": (1, 192, 28, 28)},
        target_raw="host",
        target_canonical="llvm",
        threads=1,
        out_dir=out,
        options=options,
    )


@pytest.fixture(scope="module")
def block():
    from guard import zoo

    return zoo.model_path("inception_block")


def test_build_records_options_partitions_and_memory(block, tmp_path):
    be = get_backend("onnxruntime")
    info = be.build(_req(block, tmp_path / "a"))
    assert info.payload == "model.opt.onnx" and (tmp_path / "a" / info.payload).is_file()
    assert info.session_options["graph_optimization_level"] == "all"
    assert info.session_options["intra_op_num_threads"] == 1
    assert info.session_options["providers"] == ["CPUExecutionProvider"]
    sess = be.load(tmp_path / "a", 1)
    p = sess.partitions()
    assert p.count == 1 and p.fallback_nodes == 0 and p.delegated_nodes >= 1
    assert p.by_provider == {"CPUExecutionProvider": p.delegated_nodes}
    m = sess.memory()
    # The arena holds every intermediate, so it cannot be below the liveness lower bound.
    assert m.lower_bound_bytes > 0 and m.arena_bytes >= m.lower_bound_bytes
    assert "BFCArena" in m.how and "lower bound" in m.how
    x = np.random.default_rng(0).standard_normal((1, 192, 28, 28)).astype(np.float32)
    (y,) = sess.run({"x": x})
    assert y.shape == (1, 256, 28, 28)
    meta = json.loads((tmp_path / "a" / "ort.json").read_text())
    assert meta["schema_version"] == 1


def test_optimisation_levels_change_the_payload(block, tmp_path):
    be = get_backend("onnxruntime")
    be.build(_req(block, tmp_path / "all"))
    be.build(_req(block, tmp_path / "off", graph_optimization_level="disabled"))
    ops = {
        k: [n.op_type for n in onnx.load(tmp_path / k / "model.opt.onnx").graph.node]
        for k in ("all", "off")
    }
    assert "Relu" in ops["off"] and ops["all"] != ops["off"]


def test_unknown_option_and_level_are_usage_errors(block, tmp_path):
    be = get_backend("onnxruntime")
    with pytest.raises(ModelError, match="unknown option"):
        be.build(_req(block, tmp_path / "a", fast=True))
    with pytest.raises(ModelError, match="unknown level 'turbo'"):
        be.build(_req(block, tmp_path / "b", graph_optimization_level="turbo"))
    with pytest.raises(ModelError, match="not available here"):
        be.build(_req(block, tmp_path / "c", providers=["CUDAExecutionProvider"]))


def test_unsupported_operator_names_it(tmp_path):
    g = helper.make_graph(
        [helper.make_node("Frobnicate", ["x"], ["y"], domain="ai.example")],
        "g",
        [helper.make_tensor_value_info("x", 1, [1, 192, 28, 28])],
        [helper.make_tensor_value_info("y", 1, [1, 192, 28, 28])],
    )
    path = tmp_path / "f.onnx"
    model = helper.make_model(
        g, opset_imports=[helper.make_opsetid("", 17), helper.make_opsetid("ai.example", 1)]
    )
    model.ir_version = 8  # the lowest supported onnxruntime (1.22) reads IR <= 10
    onnx.save(model, path)
    with pytest.raises(UnsupportedOpError) as ei:
        get_backend("onnxruntime").build(_req(path, tmp_path / "a"))
    assert "Frobnicate" in str(ei.value) or "ai.example" in str(ei.value)
    assert "\n" not in str(ei.value)


def test_unknown_backend_lists_the_known_ones():
    from guard.core.errors import UsageError

    with pytest.raises(UsageError, match="Use one of: bundled, onnxruntime, openvino, tvm"):
        get_backend("tensorrt")


def test_partition_merging_respects_boundaries():
    # The grouping is the compiler's (guard.compiler.graph.grouping) over ORT's provider record.
    from types import SimpleNamespace as N

    from guard.backends.onnxruntime import provider_groups

    def graph(edges):  # node i reads the outputs named in edges[i]
        return [N(input=ins, output=[f"t{i}"]) for i, ins in enumerate(edges)]

    # CPU -> DELEGATE -> CPU: the two CPU regions cannot merge (a cycle through the delegate).
    assert provider_groups(graph([[], ["t0"], ["t1"]]), ["CPU", "DEL", "CPU"]) == [[0], [1], [2]]
    # ... nor when the CPU side also reads the first CPU node directly.
    nodes = graph([[], ["t0"], ["t0", "t1"]])
    assert provider_groups(nodes, ["CPU", "DEL", "CPU"]) == [[0], [1], [2]]
    # Two disconnected CPU chains: one partition, nothing crosses between them.
    assert provider_groups(graph([[], ["t0"], [], ["t2"]]), ["CPU"] * 4) == [[0, 1, 2, 3]]
    # A CPU node beside a delegate chain (no path through the delegate): merges with CPU.
    nodes = graph([[], ["t0"], ["t0"], ["t1"]])
    assert provider_groups(nodes, ["CPU", "DEL", "CPU", "DEL"]) == [[0, 2], [1, 3]]
    # A graph input or initializer (no producer) is no edge.
    assert provider_groups(graph([["x"], ["x", "w"]]), ["CPU", "CPU"]) == [[0, 1]]
