"""Whole QDQ int8 models (onnxruntime's quantize_static over zoo topologies) through the
int8 kernels: one native partition, the host's code (VNNI here), the AVX2 build and the
reference interpreter give identical outputs. Slow: each build compiles ~50 int8 layers."""

from __future__ import annotations

import numpy as np
import pytest

from guard.compiler import import_onnx, optimize, run_reference
from guard.compiler.codegen.build import jit
from guard.compiler.codegen.llvm_target import host_target
from guard.compiler.partition.plan import plan

from ._isolated import run_isolated
from ._quantized import qdq_model
from .codegen._jit import skip_unless_runnable


@pytest.mark.slow
@pytest.mark.parametrize("name", ["shufflenet", "ppocr_cls"])
def test_whole_int8_model_is_identical_on_the_host_and_avx2_and_the_reference(name: str) -> None:
    """ShuffleNet caught a masked tail store that wrote past its lanes in the host build
    (an output of an earlier layer corrupted; the AVX2 build was right). PP-OCR cls runs
    the direct depthwise kernels, the integer pools and the byte chains."""
    run_isolated("compiler.test_int8_whole_models", "check_identical", name)


def check_identical(name: str) -> None:
    g, _ = optimize(import_onnx(qdq_model(name), {}), "O2")
    compiled = plan(g)
    assert compiled.partition_report["count"] == 1
    rng = np.random.default_rng(0)
    feeds = {k: rng.standard_normal(g.values[k].shape).astype(np.float32) for k in g.inputs}
    ref = run_reference(g, feeds)
    for target in (host_target(), skip_unless_runnable("avx2")):
        for threads in (1, 2):
            out = jit(compiled, target, threads)[0].run(feeds)
            for k in ref:
                np.testing.assert_array_equal(out[k], ref[k], err_msg=f"{k} {target.cpu} {threads}")
