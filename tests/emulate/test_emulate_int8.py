"""Whole int8 models built for AArch64 with dotprod (``-mattr=+neon,+dotprod``: ``sdot``
micro-kernels) run under qemu-aarch64 and give the x86 build's output bit for bit, at 1 and
2 threads (issue 38, must-have 5 and done-when): QDQ ShuffleNet and the QDQ PP-OCR
direction classifier (real weights from the rapidocr-onnxruntime wheel), both quantised by
onnxruntime's quantize_static, and the zoo inception block quantised by quantize_dynamic
(DynamicQuantizeLinear -> ConvInteger; tests/compiler/_quantized.py). Integer results do
not depend on the ISA, so any difference is a bug in one of the two builds.

Each model runs in its own interpreter (a native crash fails that test alone). On an
AArch64 host the test skips: the roles would swap, and the x86 side has its own tests."""

from __future__ import annotations

import shutil
import tempfile
from pathlib import Path

import numpy as np
import pytest

from guard.emulate import host_arch
from guard.emulate.tools import TOOLCHAINS

TC = TOOLCHAINS["aarch64"]
DOTPROD = "llvm -mtriple=aarch64-linux-gnu -mattr=+neon,+dotprod"

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(host_arch() == "aarch64", reason="the x86 result is the oracle here"),
    pytest.mark.skipif(
        any(shutil.which(t) is None for t in (TC.emulator, TC.compiler)),
        reason=f"{TC.emulator} or {TC.compiler} not installed (apt-get install -y "
        f"{TC.emulator_package} {TC.compiler_package} {TC.libc_package})",
    ),
]


@pytest.mark.parametrize(
    "kind,name", [("qdq", "shufflenet"), ("qdq", "ppocr_cls"), ("dynamic", "inception_block")]
)
def test_dotprod_build_under_qemu_equals_the_x86_build(kind: str, name: str) -> None:
    from compiler._isolated import run_isolated  # tests/ is on sys.path (its conftest)

    run_isolated("emulate.test_emulate_int8", "check_dotprod", kind, name)


def check_dotprod(kind: str, name: str) -> None:
    from compiler._quantized import dynamic_model, qdq_model

    from guard.compiler import import_onnx, optimize, run_reference
    from guard.compiler.codegen.build import host_target, jit
    from guard.compiler.codegen.llvm_target import codegen_target
    from guard.compiler.partition.plan import plan
    from guard.compiler.runtime.artefact import save_artefact
    from guard.emulate import EmulatedSession
    from guard.emulate.bundled import load_emulated
    from guard.manifest.target_string import canonicalize

    model = qdq_model(name) if kind == "qdq" else dynamic_model(name)
    g, _ = optimize(import_onnx(model, {}), "O2")
    compiled = plan(g)
    assert compiled.partition_report["count"] == 1, compiled.partition_report["splits"][:3]
    rng = np.random.default_rng(0)
    feeds = {k: rng.standard_normal(g.values[k].shape).astype(np.float32) for k in g.inputs}
    x86 = jit(compiled, host_target(), 1)[0].run(feeds)
    ref = run_reference(g, feeds)
    target = canonicalize(DOTPROD)
    assert codegen_target(target).int_dot == "neon_dotprod"
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / name
        save_artefact(compiled, out, pipeline="O2", target=target)
        assert "llvm.aarch64.neon.sdot" in (out / "kernels.ll").read_text()
        for threads in (1, 2):
            session = load_emulated(out, threads)
            assert isinstance(session, EmulatedSession)  # all native: one guard_main, in qemu
            got = dict(zip(session.output_names, session.run(feeds), strict=True))
            for k in g.outputs:
                np.testing.assert_array_equal(got[k], x86[k], err_msg=f"{k}, {threads} thread(s)")
    for k in g.outputs:  # and both are the reference's integer result
        np.testing.assert_array_equal(x86[k], ref[k], err_msg=k)


@pytest.mark.parametrize("weights", ["q_of_float", "s8"])
def test_integer_conv_transpose_under_qemu_equals_the_x86_build(weights: str) -> None:
    """ConvTransposeInteger (exact float32 sums: codegen/conv/transpose_blocks.py) with its
    requantise chain fused (passes/fuse_integer_epilogue.py) on NEON gives the x86 build's
    bits and the reference's, at 1 and 2 threads."""
    from compiler._isolated import run_isolated

    run_isolated("emulate.test_emulate_int8", "check_conv_transpose", weights)


def check_conv_transpose(weights: str) -> None:
    from compiler.test_fold_integer_conv_transpose import convt_model

    from guard.compiler import import_onnx, optimize, run_reference
    from guard.compiler.codegen import split
    from guard.compiler.codegen.build import host_target, jit
    from guard.compiler.partition.plan import plan
    from guard.compiler.runtime.artefact import save_artefact
    from guard.emulate.bundled import load_emulated
    from guard.manifest.target_string import canonicalize

    split.MIN_TASK_FLOPS = 1  # the kernel's row tasks run on the second thread
    g, _ = optimize(import_onnx(convt_model(weights=weights, hw=(4, 37)), {}), "O2")
    assert "FusedConvTransposeInteger" in [n.op for n in g.nodes]  # its chain fused
    compiled = plan(g)
    assert compiled.partition_report["count"] == 1
    feeds = {"x": np.random.default_rng(0).standard_normal((1, 24, 4, 37)).astype(np.float32)}
    x86 = jit(compiled, host_target(), 1)[0].run(feeds)["y"]
    np.testing.assert_array_equal(x86, run_reference(g, feeds)["y"])
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "convt"
        save_artefact(compiled, out, pipeline="O2", target=canonicalize(DOTPROD))
        for threads in (1, 2):
            session = load_emulated(out, threads)
            got = dict(zip(session.output_names, session.run(feeds), strict=True))
            np.testing.assert_array_equal(got["y"], x86, err_msg=f"{threads} thread(s)")
