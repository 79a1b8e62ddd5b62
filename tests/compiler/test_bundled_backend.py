"""The bundled backend: build -> artefact (IR text + flat weights + JSON index) -> load -> run."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import helper, numpy_helper

import guard
from guard.backends import get_backend
from guard.backends.base import BuildRequest
from guard.core.errors import ModelError


def _model(path: Path) -> Path:
    rng = np.random.default_rng(0)
    w = numpy_helper.from_array(rng.standard_normal((8, 3, 3, 3)).astype(np.float32), "w")
    s, b, m = (
        numpy_helper.from_array(rng.uniform(0.5, 1.5, 8).astype(np.float32), n) for n in "sbm"
    )
    v = numpy_helper.from_array(rng.uniform(0.5, 1.5, 8).astype(np.float32), "v")
    nodes = [
        helper.make_node("Conv", ["x", "w"], ["c"], pads=[1, 1, 1, 1]),
        helper.make_node("BatchNormalization", ["c", "s", "b", "m", "v"], ["bn"]),
        helper.make_node("Relu", ["bn"], ["r"]),
        helper.make_node("GlobalAveragePool", ["r"], ["p"]),
        helper.make_node("Flatten", ["p"], ["y"]),
    ]
    t = onnx.TensorProto.FLOAT
    g = helper.make_graph(
        nodes,
        "net",
        [helper.make_tensor_value_info("x", t, ["N", 3, 8, 8])],
        [helper.make_tensor_value_info("y", t, ["N", 8])],
        [w, s, b, m, v],
    )
    onnx.save(helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)]), path)
    return path


def _req(tmp_path: Path, model: Path, sub: str = "art", **options: object) -> BuildRequest:
    out = tmp_path / sub
    out.mkdir()
    return BuildRequest(
        model_path=model,
        input_shapes={"x": (2, 3, 8, 8)},
        target_raw="host",
        target_canonical="host",
        threads=1,
        out_dir=out,
        options=dict(options),
    )


def test_build_load_run_matches_onnxruntime(tmp_path: Path) -> None:
    import onnxruntime as ort

    model = _model(tmp_path / "m.onnx")
    backend = get_backend("bundled")
    assert backend.name == "bundled"
    req = _req(tmp_path, model)
    info = backend.build(req)
    assert info.payload == "artefact.json"
    assert info.compiler["name"] == "guard-compiler"
    assert info.compiler["version"] == guard.__version__ and info.compiler["pipeline"] == "O2"
    assert info.graph is not None and info.graph["ops_before"]["BatchNormalization"] == 1
    assert "BatchNormalization" not in info.graph["ops_after"]
    assert all({"name", "changed"} <= set(p) for p in info.graph["passes"])
    index = json.loads((req.out_dir / "weights.json").read_text())
    assert index["schema_version"] == 1
    tensor = index["tensors"][0]
    assert {"offset", "nbytes", "dtype", "shape", "sha256"} <= set(tensor)
    assert (req.out_dir / "graph.txt").is_file() and (req.out_dir / "memory_plan.json").is_file()
    assert not list(req.out_dir.glob("*.pkl"))

    sess = backend.load(req.out_dir, threads=1)
    x = np.random.default_rng(1).standard_normal((2, 3, 8, 8)).astype(np.float32)
    (y,) = sess.run({"x": x})
    (ref,) = ort.InferenceSession(str(model), providers=["CPUExecutionProvider"]).run(
        None, {"x": x}
    )
    np.testing.assert_allclose(y, ref, rtol=1e-4, atol=1e-5)
    assert sess.input_names == ["x"] and sess.output_names == ["y"]
    p = sess.partitions()
    assert p.count == 1 and p.fallback_nodes == 0 and "guard partitioner" in p.how
    m = sess.memory()
    assert 0 < m.lower_bound_bytes <= m.arena_bytes and "memory planner" in m.how


def test_pipeline_option_and_unknown_options(tmp_path: Path) -> None:
    model = _model(tmp_path / "m.onnx")
    info = get_backend("bundled").build(_req(tmp_path, model, pipeline="O0"))
    assert info.compiler["pipeline"] == "O0" and info.graph["ops_after"]["BatchNormalization"] == 1
    with pytest.raises(ModelError, match="unknown option"):
        get_backend("bundled").build(_req(tmp_path, model, "art2", fast=True))


def test_tampered_weights_fail_to_load(tmp_path: Path) -> None:
    model = _model(tmp_path / "m.onnx")
    req = _req(tmp_path, model, pipeline="O0")
    get_backend("bundled").build(req)
    blob = bytearray((req.out_dir / "weights.bin").read_bytes())
    blob[10] ^= 0xFF
    (req.out_dir / "weights.bin").write_bytes(bytes(blob))
    with pytest.raises(ModelError, match="sha256"):
        get_backend("bundled").load(req.out_dir, threads=1)


def test_the_target_table_shapes_the_build_and_is_pinned(tmp_path: Path) -> None:
    """An AVX2 build (x86-64-v3) blocks 8 channels and pins the AVX2 table; the partition
    info counts the layout conversions left in the final graph."""
    from guard.compiler.codegen.llvm_target import codegen_target, runnable_here

    from .test_assign_layout import conv_stack

    model = tmp_path / "stack.onnx"
    onnx.save(conv_stack(channels=16), model)
    req = dataclasses.replace(_req(tmp_path, model), input_shapes={"x": (1, 16, 8, 8)})
    target = "llvm -mcpu=x86-64-v3 -mtriple=x86_64-linux-gnu"
    req = dataclasses.replace(req, target_raw=target, target_canonical=target)
    info = get_backend("bundled").build(req)
    table = info.compiler["codegen"]["table"]
    assert (table["isa"], table["channel_block"], table["registers"]) == ("avx2", 8, 16)
    assert "NCHW8c" in (req.out_dir / "graph.txt").read_text()
    if runnable_here(codegen_target(target)) is not None:
        pytest.skip("this host does not run AVX2 code")
    sess = get_backend("bundled").load(req.out_dir, threads=1)
    assert sess.partitions().layout_conversions == 2  # into the conv region, out of the pool
    assert sess.partitions().to_dict()["layout_conversions"] == 2


def test_more_threads_than_cpus_builds_with_one_warning(tmp_path: Path) -> None:
    import os

    model = _model(tmp_path / "m.onnx")
    req = _req(tmp_path, model)
    req = dataclasses.replace(req, threads=(os.cpu_count() or 1) + 3)
    with pytest.warns(RuntimeWarning, match=r"more than this host's \d+ CPUs") as rec:
        get_backend("bundled").build(req)
    assert len([w for w in rec if "CPUs" in str(w.message)]) == 1
