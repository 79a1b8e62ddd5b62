"""The direct int8 depthwise kernels for depthwise QLinearConv with stride 1 along W:
the dot-product rows (quant/depthwise_dot.py) on VNNI with VBMI, the float rows
(quant/depthwise.py) where the capability has no four-byte dot product (AVX2, AVX-512
without VNNI, portable SSE2, NEON), the im2col GEMM kept on VNNI without VBMI and on
dotprod; equal to the reference interpreter bit for bit on every x86 class this host
runs at 1 and 2 threads and in AArch64 NEON code under qemu; a channel whose sums could
leave float32's exact integers keeps the GEMM path (and is exact there). Weights whose
taps are one value a channel (a box filter, an average pool) pack one tap a channel and
every reader (rows, window) reads them so."""

from __future__ import annotations

import re

import numpy as np
import pytest
from onnx import numpy_helper

from guard.compiler import import_onnx, optimize, run_reference
from guard.compiler.codegen.llvm_target import codegen_target, host_target, runnable_here
from guard.compiler.codegen.quant.depthwise import DOT4

from .test_int8 import CLASSES, _feeds, _target, check, qconv

DW = {
    "5x5": dict(x=(1, 24, 6, 40), w=(24, 1, 5, 5), pads=[2, 2, 2, 2], strides=[1, 1],
                group=24, zw=True),
    "3x3/2x1-s8-n2": dict(x=(2, 16, 12, 37), w=(16, 1, 3, 3), pads=[1, 1, 1, 1],
                          strides=[2, 1], group=16, xdt=np.int8),
    "3x5-uneven": dict(x=(1, 8, 5, 21), w=(8, 1, 3, 5), pads=[0, 2, 1, 1], strides=[1, 1],
                       group=8),
    "u8w": dict(x=(1, 20, 7, 96), w=(20, 1, 3, 3), pads=[1, 1, 1, 1], strides=[1, 1],
                group=20, wdt=np.uint8, zw=True),
}  # fmt: skip


# Uniform taps: w - zw one value a channel (ones, or a per-channel constant with zw).
UNIFORM = {
    "3x3-ones": dict(x=(1, 24, 5, 19), w=(24, 1, 3, 3), pads=[1, 1, 1, 1], strides=[1, 1],
                     group=24, ones=True),
    "3x3/2x1-s8-n2": dict(x=(2, 8, 12, 37), w=(8, 1, 3, 3), pads=[1, 1, 1, 1],
                          strides=[2, 1], group=8, xdt=np.int8),
    "3x3/2-pool": dict(x=(1, 16, 9, 17), w=(16, 1, 3, 3), pads=[1, 1, 1, 1], strides=[2, 2],
                       group=16, ones=True),
    "5x5-zw-odd": dict(x=(1, 40, 7, 23), w=(40, 1, 5, 5), pads=[2, 2, 2, 2], strides=[1, 1],
                       group=40, zw=True),
    "2x3-uneven-c3": dict(x=(1, 3, 6, 11), w=(3, 1, 2, 3), pads=[0, 1, 1, 0],
                          strides=[1, 1], group=3),
    "window": dict(x=(1, 12, 7, 7), w=(12, 1, 7, 7), pads=[0, 0, 0, 0], strides=[1, 1],
                   group=12, ones=True),
}  # fmt: skip


def _uniform(ones: bool = False, **case):
    """qconv with every tap of a channel one value: ones, or a constant a channel."""
    m = qconv(**case)
    k = case["w"][0]
    for t in m.graph.initializer:
        if t.name == "w":
            w = numpy_helper.to_array(t)
            per = np.ones(k, np.int64) if ones else np.random.default_rng(5).integers(-9, 10, k)
            if w.dtype == np.uint8:
                per = per + 128
            t.CopyFrom(numpy_helper.from_array(np.broadcast_to(
                per.astype(w.dtype)[:, None, None, None], w.shape).copy(), "w"))  # fmt: skip
    return m


def _direct(code, kind: str = "qdw") -> bool:
    return bool(re.search(rf"^define .*@guard\.{kind}\.", code.generated.ir_text, re.M))


def _expected(target) -> str:
    """The kernel a class takes: dot-product rows on VNNI with VBMI (weights whose w - zw
    leaves s8, u8 or zero-pointed s8, add the window sum), im2col on the other four-byte
    dot products, float rows elsewhere."""
    if target.int_dot == "avx512_vnni" and target.byte_lookup == "vbmi":
        return "qdwdot"
    return "none" if target.int_dot in DOT4 else "qdw"


def _any_target(cls: str | None):
    if cls is None:
        return host_target()
    if cls == "cascadelake":  # VNNI without VBMI: the im2col GEMM
        t = codegen_target("llvm -mtriple=x86_64-linux-gnu -mcpu=cascadelake")
        why = runnable_here(t)
        if why:
            pytest.skip(f"cascadelake code does not run here: {why}")
        return t
    return _target(cls)


@pytest.mark.parametrize("cls", [None, *CLASSES, "cascadelake"])
@pytest.mark.parametrize("case", list(DW))
def test_depthwise_takes_the_direct_kernel_and_equals_the_reference(cls, case) -> None:
    target = _any_target(cls)
    m = qconv(**DW[case])
    code = check(m, target, threads=(1, 2), seeds=(1, 2))
    want = _expected(target)
    assert _direct(code, "qdw") == (want == "qdw") and _direct(code, "qdwdot") == (want == "qdwdot")


@pytest.mark.parametrize("cls", ["avx2", "none"])
def test_sums_past_float32_integers_keep_the_gemm_path(cls) -> None:
    m = qconv(**DW["5x5"])
    for t in m.graph.initializer:
        if t.name == "b":  # |bias| near 2**24: float32 would round the accumulator
            b = numpy_helper.to_array(t).copy()
            b[3] = 2**24 - 5
            t.CopyFrom(numpy_helper.from_array(b, "b"))
    code = check(m, _target(cls), threads=(1, 2))
    assert not _direct(code)


def test_stride_along_w_keeps_the_gemm_path() -> None:
    m = qconv(x=(1, 32, 12, 12), w=(32, 1, 3, 3), pads=[1, 1, 1, 1], strides=[2, 2], group=32)
    assert not _direct(check(m, _target("avx2")))


def _aarch64_equal_the_reference(tmp_path, models) -> None:
    """Each model's AArch64 artefact (NEON without dotprod) under qemu-aarch64-static runs
    the direct depthwise kernel and equals the reference interpreter."""
    import shutil

    from guard.compiler.partition.plan import plan
    from guard.compiler.runtime.artefact import save_artefact
    from guard.emulate.bundled import load_emulated
    from guard.emulate.tools import TOOLCHAINS
    from guard.manifest.target_string import canonicalize

    tc = TOOLCHAINS["aarch64"]
    if host_target().arch == "aarch64" or shutil.which(tc.emulator) is None:
        pytest.skip(f"{tc.emulator} not installed or the host is AArch64")
    if shutil.which(tc.compiler) is None:
        pytest.skip(f"{tc.compiler} not installed")
    target = canonicalize("llvm -mtriple=aarch64-linux-gnu -mattr=+neon")
    for i, model in enumerate(models):
        g, _ = optimize(import_onnx(model, {}), "O0")
        out_dir = tmp_path / str(i)
        save_artefact(plan(g), out_dir, pipeline="O0", target=target)
        assert "guard.qdw." in (out_dir / "kernels.ll").read_text()
        session = load_emulated(out_dir, 1)
        for seed in (1, 2):
            f = _feeds(g, seed)
            np.testing.assert_array_equal(session.run(f)[0], run_reference(g, f)["y"])


def test_aarch64_depthwise_under_qemu_equals_the_reference(tmp_path) -> None:
    _aarch64_equal_the_reference(tmp_path, [qconv(**DW[c]) for c in ("5x5", "3x3/2x1-s8-n2")])


@pytest.mark.parametrize("cls", [None, "avx2"])
def test_row_bands_of_a_large_depthwise_layer_equal_the_reference(cls) -> None:
    """Big enough for the split rule's row bands (odd first rows: the dot-product rows
    pair output rows from each task's first one)."""
    m = qconv(x=(1, 64, 42, 64), w=(64, 1, 5, 5), pads=[2, 2, 2, 2], strides=[1, 1],
              group=64, wdt=np.uint8, zw=True)  # fmt: skip
    target = _any_target(cls)
    code = check(m, target, threads=(1, 2), seeds=(1,))
    (step,) = code.plan.steps()
    assert len(step.parts) >= 2 and _direct(code, "qdwdot" if cls is None else "qdw")


@pytest.mark.parametrize("cls", [None, "avx512bw", "avx2", "none"])
@pytest.mark.parametrize("case", list(UNIFORM))
def test_uniform_taps_equal_the_reference(cls, case) -> None:
    """One packed tap a channel: the float rows (AVX2, AVX-512 without VNNI, portable)
    and the window read the block as pack wrote it; stride 2 along W keeps the GEMM."""
    target = _any_target(cls)
    code = check(_uniform(**UNIFORM[case]), target, threads=(1, 2), seeds=(1, 2))
    (step,) = code.plan.steps()
    if UNIFORM[case]["strides"][1] == 2:
        assert not _direct(code, "qdw") and not _direct(code, "qdwdot")
    elif case == "window" or _expected(target) == "qdw":  # the window is inline
        assert step.attrs["q_dw"] and step.attrs["q_dw_uniform"]
        assert _direct(code, "qdw") == (case != "window")


def test_aarch64_uniform_depthwise_under_qemu_equals_the_reference(tmp_path) -> None:
    """The float rows with one packed tap a channel in AArch64 NEON code."""
    cases = ("3x3-ones", "5x5-zw-odd")
    _aarch64_equal_the_reference(tmp_path, [_uniform(**UNIFORM[c]) for c in cases])
