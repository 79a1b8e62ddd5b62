"""Helpers shared by the zoo tests: run a model on seeded inputs and judge its outputs."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort

import guard.zoo as zoo

DYNAMIC_DIM = 2  # what a symbolic dim ("N") is bound to when the tests run a model


def session(path: Path, *, optimize: bool = True) -> ort.InferenceSession:
    options = ort.SessionOptions()
    options.intra_op_num_threads = 1
    if not optimize:
        options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    return ort.InferenceSession(str(path), options, providers=["CPUExecutionProvider"])


def seeded_inputs(sess: ort.InferenceSession, seed: int) -> dict[str, np.ndarray]:
    """N(0, 1) float32 for every input, symbolic dims bound to DYNAMIC_DIM."""
    rng = np.random.default_rng(seed)
    feeds = {}
    for value in sess.get_inputs():
        assert value.type == "tensor(float)", value
        shape = [d if isinstance(d, int) else DYNAMIC_DIM for d in value.shape]
        feeds[value.name] = rng.standard_normal(shape, dtype=np.float32)
    return feeds


def assert_nondegenerate(name: str, y: np.ndarray) -> None:
    """Finite and informative: not constant; a softmax not saturated, logits not tiny."""
    assert np.isfinite(y).all(), f"{name}: non-finite outputs"
    assert np.ptp(y) > 0, f"{name}: every output is equal"
    rows = y.reshape(y.shape[0], -1)
    if rows.min() >= 0 and np.allclose(rows.sum(axis=1), 1.0, atol=1e-3):  # probabilities
        assert rows.max() < 0.99, f"{name}: softmax saturated (max {rows.max()})"
        logp = np.log(np.maximum(rows, 1e-30))
        assert logp.std() > 0.1, f"{name}: softmax nearly uniform (log-p std {logp.std()})"
    else:
        assert rows.std() > 0.1, f"{name}: outputs nearly constant (std {rows.std()})"


def dims(value: onnx.ValueInfoProto) -> list[int | str]:
    return [d.dim_param or d.dim_value for d in value.type.tensor_type.shape.dim]


def strip_weights(model: onnx.ModelProto) -> None:
    """Drop float initializer data in place, keeping dims: shape inference reads only those,
    and serialising VGG's 575 MB for it would cost more than the whole check."""
    for t in model.graph.initializer:
        if t.data_type == onnx.TensorProto.FLOAT and t.raw_data:
            t.ClearField("raw_data")
            t.data_location = onnx.TensorProto.EXTERNAL
            entry = t.external_data.add()
            entry.key, entry.value = "location", "stripped-for-shape-inference"


def run_checks(name: str, path: Path) -> None:
    """What every zoo model passes: the full checker, strict shape inference that leaves
    every used tensor with a complete shape, its describe(), and a seeded onnxruntime run."""
    onnx.checker.check_model(str(path), full_check=True)
    model = onnx.load(str(path))
    desc = zoo.describe(name)
    assert {i.name: dims(i) for i in model.graph.input} == desc["inputs"]
    assert [(o.domain, o.version) for o in model.opset_import] == [("", desc["opset"])]
    inits = {t.name for t in model.graph.initializer}
    assert not inits & {i.name for i in model.graph.input}, "initializers listed as inputs"
    assert model.ir_version >= 4

    strip_weights(model)
    inferred = onnx.shape_inference.infer_shapes(model, check_type=True, strict_mode=True)
    assert {o.name: dims(o) for o in inferred.graph.output} == desc["outputs"]
    known = {v.name: dims(v) for v in [*inferred.graph.value_info, *inferred.graph.output]}
    used = {value for node in model.graph.node for value in node.input} | set(desc["outputs"])
    for node in model.graph.node:
        for out in node.output:
            if out in used:  # Dropout's unused mask output stays unknown in opset 9
                assert out in known and all(known[out]), f"{name}: no full shape for {out}"
    del model, inferred

    sess = session(path)
    outputs = [sess.run(None, seeded_inputs(sess, seed)) for seed in (0, 1)]
    for out, expected in zip(outputs[0], desc["outputs"].values(), strict=True):
        bound = [d if isinstance(d, int) else DYNAMIC_DIM for d in expected]
        assert list(out.shape) == bound
        assert_nondegenerate(name, out)
    assert any(not np.array_equal(a, b) for a, b in zip(*outputs, strict=True)), (
        f"{name}: two different inputs give the same outputs"
    )
