"""``partitions.quant_conversions`` in the results JSON: the bundled partition report's count
of QuantizeLinear/DequantizeLinear left on activations (issue 38, must-have 2) reaches the
result's partitions block where the backend counts it, reads as a typed record, and a
result written before it existed (or by a backend that does not count it) reads and writes
back byte for byte, the key not added."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

from guard.backends import get_backend
from guard.backends.base import BuildRequest, PartitionInfo
from guard.results.result import QuantConversions, Result


def _qdq_model(path: Path) -> Path:
    """x -> Q -> DQ -> Add(w) -> Relu -> Q -> DQ: four conversions on activations, two
    Q->DQ pairs (the constant weight's DequantizeLinear is folded, not one)."""
    s, z = np.float32(0.1), np.uint8(9)
    nodes = [
        helper.make_node("QuantizeLinear", ["x", "s", "z"], ["q"]),
        helper.make_node("DequantizeLinear", ["q", "s", "z"], ["d"]),
        helper.make_node("DequantizeLinear", ["wq", "s", "z"], ["w"]),
        helper.make_node("Add", ["d", "w"], ["a"]),
        helper.make_node("Relu", ["a"], ["r"]),
        helper.make_node("QuantizeLinear", ["r", "s", "z"], ["q2"]),
        helper.make_node("DequantizeLinear", ["q2", "s", "z"], ["y"]),
    ]
    inits = {"s": s, "z": z, "wq": np.arange(4, dtype=np.uint8)}
    g = helper.make_graph(
        nodes,
        "qdq",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [4])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [4])],
        [numpy_helper.from_array(np.asarray(v), k) for k, v in inits.items()],
    )
    onnx.save(helper.make_model(g, opset_imports=[helper.make_opsetid("", 13)]), path)
    return path


def test_a_bundled_result_records_the_quant_conversions_with_its_partitions(tmp_path: Path):
    be = get_backend("bundled")
    req = BuildRequest(
        model_path=_qdq_model(tmp_path / "m.onnx"), input_shapes={"x": (4,)},
        target_raw="host", target_canonical="host", threads=1, out_dir=tmp_path / "art",
        options={"pipeline": "O0"},
    )  # fmt: skip
    req.out_dir.mkdir()
    be.build(req)
    info = be.load(req.out_dir, threads=1).partitions()
    assert info.quant_conversions == {"nodes": 4, "pairs": 2, "fused": 0}
    block = info.to_dict()
    assert block["quant_conversions"] == {"nodes": 4, "pairs": 2, "fused": 0}
    assert PartitionInfo.from_dict(block) == info
    text = json.dumps({"model": "m", "backend": "bundled", "partitions": block})
    r = Result.from_json(json.loads(text))
    assert r.partitions is not None
    assert r.partitions.quant_conversions == QuantConversions(nodes=4, pairs=2, fused=0)
    assert json.dumps(r.to_json()) == text


def test_a_partitions_block_without_it_is_written_and_read_as_before():
    info = PartitionInfo(count=1, delegated_nodes=3, fallback_nodes=0, how="onnxruntime")
    block = info.to_dict()
    assert "quant_conversions" not in block  # a backend that does not count them
    assert list(block) == [
        "count", "delegated_nodes", "fallback_nodes", "by_provider", "details", "how",
        "layout_conversions",
    ]  # fmt: skip
    assert PartitionInfo.from_dict(block).to_dict() == block
    old = {"model": "m", "backend": "bundled", "partitions": block, "layout_conversions": None}
    text = json.dumps(old, indent=2)
    r = Result.from_json(json.loads(text))
    assert r.partitions is not None and r.partitions.quant_conversions is None
    assert json.dumps(r.to_json(), indent=2) == text


def test_a_malformed_count_reads_as_absent_and_passes_through():
    for junk in ("4", [4], {"nodes": "four", "pairs": None}, None):
        text = json.dumps({"partitions": {"count": 1, "quant_conversions": junk}})
        r = Result.from_json(json.loads(text))
        assert r.partitions is not None
        qc = r.partitions.quant_conversions
        assert qc is None or (qc.nodes is None and qc.pairs is None)
        assert json.dumps(r.to_json()) == text
