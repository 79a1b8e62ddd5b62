"""Real-weight models shipped inside PyPI wheels (the test extra installs most): each
compiles to one native partition (every node generated code) and matches the reference
interpreter. A model whose wheel is not installed is skipped, saying which."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import numpy as np
import pytest

from guard.compiler import import_onnx, optimize, run_reference
from guard.compiler.codegen.build import jit
from guard.compiler.partition.plan import plan

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
    spec = importlib.util.find_spec(package)
    if spec is None or not spec.submodule_search_locations:
        pytest.skip(f"the {package} wheel is not installed (pip install -e '.[test]')")
    found = sorted(Path(next(iter(spec.submodule_search_locations))).glob(pattern))
    if not found:
        pytest.skip(f"no {pattern} inside the installed {package} wheel")
    return found[-1]


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
