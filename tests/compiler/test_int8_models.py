"""Whole QDQ int8 models (onnxruntime's quantize_static over four light topologies at
opset 13, made and cached by tests/compiler/_quantized.py): fold_qdq and the native
quantize/dequantize leave only the integer compute ops outside generated code (and none
once they have an emitter), the bundled backend matches the reference interpreter and
its 1- and 2-thread runs are identical, and it differs from onnxruntime's int8 no more
than onnxruntime's optimised and unoptimised sessions differ from each other, as a
fraction of the output range (issue 38, must-have 3). Slow: each model is quantised once per cache key (seconds to a minute)."""

from __future__ import annotations

import numpy as np
import pytest

from guard.compiler import import_onnx, optimize, run_reference
from guard.compiler.codegen import emitters
from guard.compiler.codegen.build import host_target, jit
from guard.compiler.partition.plan import plan

from ._isolated import run_isolated
from ._quantized import qdq_model
from .codegen._jit import skip_unless_runnable

pytestmark = pytest.mark.slow

MODELS = ["shufflenet", "inception_v2", "densenet121", "zfnet512"]
INTEGER_COMPUTE = {"QLinearConv", "QLinearMatMul"}


def _range_dev(a: np.ndarray, b: np.ndarray, ref: np.ndarray) -> float:
    return float(np.abs(a.astype(np.float64) - b).max()) / (float(ref.max() - ref.min()) or 1.0)


@pytest.mark.parametrize("name", MODELS)
def test_qdq_model_is_native_but_for_integer_compute_and_matches(name):
    run_isolated("compiler.test_int8_models", "check_model", name)  # one model per process


@pytest.mark.parametrize("name", MODELS)
def test_the_avx2_build_equals_the_reference_too(name):
    # The AVX2 (x86-64-v3) build: exact by vpmaddwd where the host has VNNI. All but
    # ShuffleNet are in the heavy tier (Inception-v2's AVX2 build compiles for six minutes).
    run_isolated("compiler.test_int8_models", "check_model", name, "avx2")


def check_model(name: str, isa: str = "host") -> None:
    import onnxruntime as ort

    target = host_target() if isa == "host" else skip_unless_runnable(isa)
    path = qdq_model(name)
    g0 = import_onnx(path)
    g, rep = optimize(g0, "O2")
    fold = next(p for p in rep.passes if p.name == "fold_qdq")
    assert fold.stats["num_folded_conv"] > 0
    compiled = plan(g)
    pr = compiled.partition_report
    left = {s["op"] for s in pr["splits"]}
    assert left <= INTEGER_COMPUTE, pr["splits"][:3]
    if INTEGER_COMPUTE <= set(emitters.table()):
        assert pr["count"] == 1, pr["splits"][:3]
    assert pr["quant_conversions"]["nodes"] < sum(n.op.endswith("antizeLinear") for n in g0.nodes)

    x = np.random.default_rng(0).standard_normal(g0.values[g0.inputs[0]].shape).astype(np.float32)
    feeds = {g0.inputs[0]: x}
    out = g0.outputs[0]
    ref = run_reference(g, feeds)[out]
    rt1, code = jit(compiled, target, threads=1)
    rt2, _ = jit(compiled, threads=2, code=code)
    got1, got2 = rt1.run(feeds)[out], rt2.run(feeds)[out]
    np.testing.assert_array_equal(got1, got2)
    # Bit for bit, the float steps between a DequantizeLinear and the next QuantizeLinear
    # included (AveragePool divides as the reference does; one ulp there moved a step).
    np.testing.assert_array_equal(got1, ref)

    sessions = {}
    for level in ("ORT_ENABLE_ALL", "ORT_DISABLE_ALL"):
        so = ort.SessionOptions()
        so.graph_optimization_level = getattr(ort.GraphOptimizationLevel, level)
        sess = ort.InferenceSession(str(path), so, providers=["CPUExecutionProvider"])
        sessions[level] = sess.run(None, feeds)[0]
    theirs = _range_dev(
        sessions["ORT_ENABLE_ALL"], sessions["ORT_DISABLE_ALL"], sessions["ORT_DISABLE_ALL"]
    )
    for level, o in sessions.items():
        assert _range_dev(got1, o, o) <= theirs + 1e-6, (level, theirs)
