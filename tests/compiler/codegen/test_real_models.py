"""Real-weight models shipped inside PyPI wheels (the test extra installs most): each
compiles to one native partition (every node generated code) and matches the reference
interpreter; a model with control flow runs only its If nodes on the host, each branch one
native partition, and matches onnxruntime. A model whose wheel is not installed is
skipped, saying which."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from guard.compiler import import_onnx, optimize, run_reference
from guard.compiler.codegen.build import jit
from guard.compiler.partition.plan import plan
from guard.zoo.wheels import wheel_model

# (id, package, model file glob inside the package, input shapes)
MODELS = [
    ("ppocr-v4-det", "rapidocr_onnxruntime", "models/ch_PP-OCRv4_det_infer.onnx",
     {"x": (1, 3, 64, 96)}),
    ("ppocr-v4-rec", "rapidocr_onnxruntime", "models/ch_PP-OCRv4_rec_infer.onnx",
     {"x": (1, 3, 48, 96)}),
    ("ppocr-cls", "rapidocr_onnxruntime", "models/ch_ppocr_mobile_v2.0_cls_infer.onnx",
     {"x": (1, 3, 48, 192)}),
    ("magika", "magika", "models/*/model.onnx", {"bytes": (1, 2048)}),
    # Silero VAD (its wheel pulls torch, so the test extra leaves it out): the LSTM
    # variants, which have no If
    ("silero-vad-sequence", "silero_vad", "data/silero_vad_16k_sequence.onnx",
     {"input": (4, 576)}),
    ("silero-vad-16k", "silero_vad", "data/silero_vad_openvino_16k.onnx", {}),
]  # fmt: skip


def model_path(package: str, pattern: str) -> Path:
    path, why = wheel_model(package, pattern)
    if path is None:
        pytest.skip(why)
    return path


def feeds_for(g, rng: np.random.Generator) -> dict[str, np.ndarray]:
    out = {}
    for k in g.inputs:
        v = g.values[k]
        if v.dtype == np.float32:
            out[k] = rng.uniform(-1, 1, v.shape).astype(np.float32)
        else:  # the byte classifier reads byte values
            out[k] = rng.integers(0, 256, v.shape).astype(v.dtype)
    return out


@pytest.mark.slow
@pytest.mark.parametrize("case", MODELS, ids=[m[0] for m in MODELS])
def test_real_model_is_one_native_partition(case):
    _, package, pattern, shapes = case
    g0 = import_onnx(model_path(package, pattern), shapes)
    g, _ = optimize(g0, "O2")
    compiled = plan(g)
    rep = compiled.partition_report
    assert (rep["count"], rep["fallback_nodes"]) == (1, 0), compiled.partition_text()
    rt, _ = jit(compiled)
    feeds = feeds_for(g0, np.random.default_rng(0))
    ref = run_reference(g0, feeds)
    out = rt.run(feeds)
    for k in ref:
        scale = float(np.abs(ref[k]).max(initial=0.0))
        np.testing.assert_allclose(out[k], ref[k], rtol=1e-3, atol=1e-4 * max(scale, 1.0))


# Silero VAD with control flow: (id, file, input shapes). silero_vad.onnx's 8 kHz branch
# takes 256-sample windows (at 512 its shapes differ from the 16 kHz branch's, and
# onnxruntime fails in it); op15 and half decide every If on shapes, so import inlines them.
SILERO_IF = [
    ("silero-vad", "data/silero_vad.onnx", {"input": (1, 256), "state": (2, 1, 128)}),
    ("silero-vad-op18-ifless", "data/silero_vad_op18_ifless.onnx",
     {"input": (1, 512), "state": (2, 1, 128)}),
    ("silero-vad-16k-op15", "data/silero_vad_16k_op15.onnx",
     {"input": (1, 512), "state": (2, 1, 128)}),
    ("silero-vad-half", "data/silero_vad_half.onnx", {"input": (1, 512), "state": (2, 1, 128)}),
]  # fmt: skip


@pytest.mark.slow
@pytest.mark.parametrize("case", SILERO_IF, ids=[m[0] for m in SILERO_IF])
def test_control_flow_models_run_only_their_ifs_on_the_host(case):
    import onnxruntime as ort

    _, pattern, shapes = case
    path = model_path("silero_vad", pattern)
    g, _ = optimize(import_onnx(path, shapes), "O2")
    compiled = plan(g)
    rep = compiled.partition_report
    host_ops = [n.op for i, n in enumerate(compiled.view.nodes)
                if compiled.partitions.partitions[compiled.partitions.group_of[i]].backend == "cpu"]  # fmt: skip
    assert set(host_ops) <= {"If"}, compiled.partition_text()
    for cf in rep.get("control_flow", []):
        for sub in cf["subgraphs"].values():
            assert (sub["count"], sub["fallback_nodes"]) == (1, 0), compiled.partition_text()
    rt, _ = jit(compiled)
    sess = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    rng = np.random.default_rng(0)
    for sr in (16000, 8000):
        feeds = {"input": rng.uniform(-1, 1, shapes["input"]).astype(np.float32),
                 "state": np.zeros(shapes["state"], np.float32)}  # fmt: skip
        if "sr" in g.inputs:
            feeds["sr"] = np.array(sr, np.int64)
        for _ in range(3):  # the state carried from call to call, as a stream is run
            want = sess.run(None, feeds)
            got = rt.run(feeds)
            for k, w in zip(g.outputs, want, strict=True):
                np.testing.assert_allclose(got[k], w, rtol=1e-3, atol=1e-4)
            feeds = {**feeds, "state": want[1],
                     "input": rng.uniform(-1, 1, shapes["input"]).astype(np.float32)}  # fmt: skip
