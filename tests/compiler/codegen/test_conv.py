"""Generated convolution kernels against a float64 numpy convolution on seeded inputs.

All cases go into one module, JIT-compiled once. They hit odd channel counts, output
tails, stride 2 and 3, asymmetric pads, dilation, 1x1 (in place and strided), grouped,
depthwise (stride 1/2/3, padded, dilated), batch > 1, several k-chunks, every schedule
knob, both loop orders, the three vector widths, a null bias and an epilogue.
"""

from __future__ import annotations

import zlib

import numpy as np
import pytest
from llvmlite import ir

from guard.compiler.codegen.conv import ConvKernel, ConvSchedule, default_conv_schedule

from ._jit import Jitted, f32


def relu(builder: ir.IRBuilder, v: ir.Value) -> ir.Value:
    zero = ir.Constant(v.type, 0.0)
    return builder.select(builder.fcmp_ordered(">", v, zero), v, zero)


def conv_reference(x, w, bias, strides, pads, dilations, group) -> np.ndarray:
    """Direct float64 convolution (NCHW, OIHW), the oracle."""
    n, c, h, wd = x.shape
    k, cg, r, s = w.shape
    sh, sw = strides
    dh, dw = dilations
    xp = np.pad(x.astype(np.float64), ((0, 0), (0, 0), (pads[0], pads[2]), (pads[1], pads[3])))
    oh = (h + pads[0] + pads[2] - dh * (r - 1) - 1) // sh + 1
    ow = (wd + pads[1] + pads[3] - dw * (s - 1) - 1) // sw + 1
    out = np.zeros((n, k, oh, ow))
    kg = k // group
    for g in range(group):
        xs = xp[:, g * cg : (g + 1) * cg]
        for i in range(r):
            for j in range(s):
                patch = xs[
                    :,
                    :,
                    i * dh : i * dh + sh * (oh - 1) + 1 : sh,
                    j * dw : j * dw + sw * (ow - 1) + 1 : sw,
                ]
                out[:, g * kg : (g + 1) * kg] += np.einsum(
                    "nchw,kc->nkhw", patch, w[g * kg : (g + 1) * kg, :, i, j]
                )
    if bias is not None:
        out += bias[None, :, None, None]
    return out


CS = ConvSchedule
# name: (N, C, H, W, K, R, S, strides, pads, dilations, group, extra)
CASES: dict[str, tuple] = {
    "3x3_pad": (1, 5, 9, 11, 7, 3, 3, (1, 1), (1, 1, 1, 1), (1, 1), 1, {}),
    "3x3_stride2": (1, 6, 13, 10, 9, 3, 3, (2, 2), (1, 1, 1, 1), (1, 1), 1, {}),
    "asym_pads_stride3": (1, 3, 11, 12, 5, 2, 3, (3, 2), (0, 2, 1, 0), (1, 1), 1, {}),
    "dilated": (1, 4, 12, 12, 6, 3, 3, (1, 1), (2, 2, 2, 2), (2, 2), 1, {}),
    "7x7_s2_first": (1, 3, 32, 32, 16, 7, 7, (2, 2), (3, 3, 3, 3), (1, 1), 1, {}),
    "1x1_inplace": (1, 19, 7, 9, 33, 1, 1, (1, 1), (0, 0, 0, 0), (1, 1), 1, {}),
    "1x1_stride2": (1, 8, 9, 9, 12, 1, 1, (2, 2), (0, 0, 0, 0), (1, 1), 1, {}),
    "1x1_padded": (1, 4, 5, 5, 4, 1, 1, (1, 1), (1, 1, 1, 1), (1, 1), 1, {}),
    "grouped": (1, 8, 10, 10, 12, 3, 3, (1, 1), (1, 1, 1, 1), (1, 1), 4, {}),
    "grouped_1x1_batch": (2, 6, 5, 7, 9, 1, 1, (1, 1), (0, 0, 0, 0), (1, 1), 3, {}),
    "channel_multiplier": (1, 3, 8, 8, 6, 3, 3, (1, 1), (1, 1, 1, 1), (1, 1), 3, {}),
    "batch3": (3, 5, 8, 9, 10, 3, 3, (1, 1), (1, 1, 1, 1), (1, 1), 1, {}),
    "kchunks": (
        1,
        21,
        6,
        6,
        10,
        3,
        3,
        (1, 1),
        (1, 1, 1, 1),
        (1, 1),
        1,
        dict(schedule=CS(oc_block=4, ow_block=16, kc_channels=4, nc=16, mc=8)),
    ),
    "kchunks_1x1": (
        1,
        30,
        5,
        5,
        10,
        1,
        1,
        (1, 1),
        (0, 0, 0, 0),
        (1, 1),
        1,
        dict(schedule=CS(oc_block=3, ow_block=32, kc_channels=7, nc=32, mc=3, unroll=1)),
    ),
    "order_mn": (
        1,
        7,
        9,
        9,
        13,
        3,
        3,
        (1, 1),
        (1, 1, 1, 1),
        (1, 1),
        1,
        dict(
            schedule=CS(
                oc_block=5, ow_block=32, kc_channels=3, nc=64, mc=10, unroll=3, loop_order="mn"
            )
        ),
    ),
    "epilogue": (2, 7, 9, 9, 13, 3, 3, (1, 1), (1, 1, 1, 1), (1, 1), 1, dict(epilogue=True)),
    "no_bias": (1, 4, 6, 6, 5, 3, 3, (1, 1), (0, 0, 0, 0), (1, 1), 1, dict(bias=False)),
    "wide_tile": (
        1,
        16,
        14,
        14,
        20,
        3,
        3,
        (1, 1),
        (1, 1, 1, 1),
        (1, 1),
        1,
        dict(schedule=CS(oc_block=2, ow_block=64, kc_channels=16, nc=128, mc=4)),
    ),
    "resnet_7x7_tail": (1, 32, 7, 7, 24, 3, 3, (1, 1), (1, 1, 1, 1), (1, 1), 1, {}),
    # channels in vectors (small images): ct buffer transposed into y
    "ch_3x3_7x7": (
        1,
        9,
        7,
        7,
        40,
        3,
        3,
        (1, 1),
        (1, 1, 1, 1),
        (1, 1),
        1,
        dict(
            schedule=CS(oc_block=32, ow_block=5, kc_channels=4, nc=20, mc=64, vectorize="channels")
        ),
    ),
    "ch_1x1_inplace_epi": (
        2,
        20,
        5,
        6,
        35,
        1,
        1,
        (1, 1),
        (0, 0, 0, 0),
        (1, 1),
        1,
        dict(
            epilogue=True,
            schedule=CS(
                oc_block=16, ow_block=4, kc_channels=7, nc=12, mc=32, unroll=1, vectorize="channels"
            ),
        ),
    ),
    "ch_stride2_grouped_mn": (
        1,
        8,
        11,
        9,
        36,
        3,
        3,
        (2, 2),
        (1, 0, 1, 1),
        (1, 1),
        2,
        dict(
            schedule=CS(
                oc_block=16,
                ow_block=3,
                kc_channels=3,
                nc=15,
                mc=16,
                loop_order="mn",
                vectorize="channels",
            )
        ),
    ),
    "ch_default_7x7": (1, 64, 7, 7, 64, 3, 3, (1, 1), (1, 1, 1, 1), (1, 1), 1, dict(bias=False)),
    # one output position: a fully connected layer as a 1x1 conv, a whole-image kernel
    "fc_as_1x1": (2, 64, 1, 1, 100, 1, 1, (1, 1), (0, 0, 0, 0), (1, 1), 1, dict(epilogue=True)),
    "whole_image": (1, 6, 7, 7, 10, 7, 7, (1, 1), (0, 0, 0, 0), (1, 1), 1, {}),
    # a fused residual Add before the epilogue, in each orientation and the depthwise kernel
    "res_positions": (
        2,
        5,
        9,
        11,
        7,
        3,
        3,
        (1, 1),
        (1, 1, 1, 1),
        (1, 1),
        1,
        dict(residual=True, epilogue=True),
    ),
    "res_pointwise": (1, 19, 7, 9, 33, 1, 1, (1, 1), (0, 0, 0, 0), (1, 1), 1, dict(residual=True)),
    "res_channels": (
        2,
        9,
        7,
        7,
        40,
        3,
        3,
        (1, 1),
        (1, 1, 1, 1),
        (1, 1),
        1,
        dict(
            residual=True,
            epilogue=True,
            schedule=CS(oc_block=32, ow_block=5, kc_channels=4, nc=20, mc=64, vectorize="channels"),
        ),
    ),
    "res_in_place_kchunks": (
        1,
        21,
        6,
        6,
        10,
        3,
        3,
        (1, 1),
        (1, 1, 1, 1),
        (1, 1),
        1,
        dict(
            residual=True,
            in_place=True,
            epilogue=True,
            schedule=CS(oc_block=4, ow_block=16, kc_channels=4, nc=16, mc=8),
        ),
    ),
    "res_in_place_channels": (
        1,
        9,
        7,
        7,
        40,
        3,
        3,
        (1, 1),
        (1, 1, 1, 1),
        (1, 1),
        1,
        dict(
            residual=True,
            in_place=True,
            schedule=CS(oc_block=32, ow_block=5, kc_channels=4, nc=20, mc=64, vectorize="channels"),
        ),
    ),
    "res_in_place_dw": (
        1,
        4,
        9,
        20,
        4,
        3,
        3,
        (1, 1),
        (1, 1, 1, 1),
        (1, 1),
        4,
        dict(residual=True, in_place=True),
    ),
    "res_dw": (
        2,
        4,
        15,
        37,
        4,
        3,
        3,
        (2, 2),
        (1, 1, 1, 1),
        (1, 1),
        4,
        dict(residual=True, epilogue=True),
    ),
    # depthwise
    "dw_3x3": (1, 5, 9, 19, 5, 3, 3, (1, 1), (1, 1, 1, 1), (1, 1), 5, {}),
    "dw_3x3_s2": (2, 4, 15, 37, 4, 3, 3, (2, 2), (1, 1, 1, 1), (1, 1), 4, dict(epilogue=True)),
    "dw_5x5_s3_asym": (1, 3, 17, 40, 3, 5, 5, (3, 3), (2, 1, 0, 2), (1, 1), 3, {}),
    "dw_dilated": (1, 3, 12, 20, 3, 3, 3, (1, 1), (2, 2, 2, 2), (2, 2), 3, dict(bias=False)),
    "dw_wide_nopad": (1, 2, 5, 70, 2, 3, 3, (1, 1), (0, 0, 0, 0), (1, 1), 2, {}),
    # vector widths of AVX2 and NEON
    "w8": (
        1,
        5,
        9,
        11,
        7,
        3,
        3,
        (2, 1),
        (1, 0, 1, 2),
        (1, 1),
        1,
        dict(vector_width=8, epilogue=True),
    ),
    "w4_dw": (1, 3, 7, 9, 3, 3, 3, (2, 2), (1, 1, 1, 1), (1, 1), 3, dict(vector_width=4)),
    "w4_1x1": (1, 6, 5, 3, 5, 1, 1, (1, 1), (0, 0, 0, 0), (1, 1), 1, dict(vector_width=4)),
}


def _kernel(case: tuple) -> ConvKernel:
    n, c, h, w, k, r, s, st, pd, dl, g, extra = case
    kw = {key: v for key, v in extra.items() if key in ("schedule", "vector_width", "residual")}
    return ConvKernel(n, c, h, w, k, r, s, strides=st, pads=pd, dilations=dl, group=g, **kw)


@pytest.fixture(scope="module")
def jitted() -> Jitted:
    module = ir.Module("conv_tests")
    for name, case in CASES.items():
        _kernel(case).emit(module, name, epilogue=relu if case[-1].get("epilogue") else None)
    return Jitted(module)


@pytest.mark.parametrize("name", list(CASES))
def test_conv_matches_numpy(jitted: Jitted, name: str) -> None:
    case = CASES[name]
    k = _kernel(case)
    extra = case[-1]
    rng = np.random.default_rng(zlib.crc32(name.encode()))
    x = f32(rng, k.N, k.C, k.H, k.W)
    w = f32(rng, k.K, k.C // k.group, k.R, k.S)
    bias = f32(rng, k.K) if extra.get("bias", True) else None
    y = np.full((k.N, k.K, k.OH, k.OW), np.nan, np.float32)
    args = [x, k.pack_weights(w), bias, y]
    res = f32(rng, *y.shape) if k.residual else None
    if res is not None and extra.get("in_place"):  # y holds the residual and is overwritten
        y[...] = res
        args.append(y)
    elif res is not None:
        args.append(res)
    jitted.fn(name, len(args))(*args)
    ref = conv_reference(x, w, bias, k.strides, k.pads, k.dilations, k.group)
    if res is not None:
        ref = ref + res
    if extra.get("epilogue"):
        ref = np.maximum(ref, 0)
    crs = (k.C // k.group) * k.R * k.S
    np.testing.assert_allclose(y, ref, rtol=1e-4, atol=1e-4 * np.sqrt(crs))


def test_gathers_and_shared_micro_kernels_in_ir(jitted: Jitted) -> None:
    text = jitted.ir
    assert "@llvm.masked.gather.v16f32" in text  # Xcol built with masked gathers
    assert "shufflevector <16 x float>" in text  # stride-2 depthwise: even-lane shuffle
    assert "@llvm.fma.v16f32" in text and "@llvm.fma.v4f32" in text


def test_small_images_vectorise_channels_by_default() -> None:
    # 7x7: 49 positions fill 16-lane vectors to 77%; 512 channels fill them exactly
    assert (
        default_conv_schedule(1, 512, 7, 7, 512, 3, 3, (1, 1), (1, 1, 1, 1)).vectorize == "channels"
    )
    assert (
        default_conv_schedule(1, 64, 56, 56, 64, 3, 3, (1, 1), (1, 1, 1, 1)).vectorize
        == "positions"
    )
    assert _kernel(CASES["ch_default_7x7"]).sched.vectorize == "channels"


def test_default_schedule_valid_and_fits_the_stack() -> None:
    zoo = [  # resnet50, squeezenet, inception, mobilenet-like shapes
        (1, 3, 224, 224, 64, 7, 7, (2, 2), (3, 3, 3, 3), 1),
        (1, 64, 56, 56, 64, 3, 3, (1, 1), (1, 1, 1, 1), 1),
        (1, 512, 7, 7, 512, 3, 3, (1, 1), (1, 1, 1, 1), 1),
        (1, 1024, 14, 14, 2048, 1, 1, (2, 2), (0, 0, 0, 0), 1),
        (1, 96, 55, 55, 16, 1, 1, (1, 1), (0, 0, 0, 0), 1),
        (1, 192, 28, 28, 32, 5, 5, (1, 1), (2, 2, 2, 2), 1),
        (1, 32, 112, 112, 32, 3, 3, (1, 1), (1, 1, 1, 1), 32),
        (1, 64, 112, 112, 64, 3, 3, (2, 2), (1, 1, 1, 1), 64),
        (1, 2048, 1, 1, 1000, 1, 1, (1, 1), (0, 0, 0, 0), 1),
        (1, 64, 600, 600, 64, 3, 3, (1, 1), (1, 1, 1, 1), 1),  # wide rows: fewer channels per chunk
        (1, 8, 40, 1000, 16, 7, 7, (1, 1), (3, 3, 3, 3), 1),
    ]
    for n, c, h, w, k, r, s, st, pd, g in zoo:
        for width in (4, 8, 16):
            sched = default_conv_schedule(n, c, h, w, k, r, s, st, pd, (1, 1), g, width)
            sched.validate(width)
            ow = (w + pd[1] + pd[3] - s) // st[1] + 1
            rows = max(1, sched.nc // ow)
            assert sched.kc_channels * r * s * -(-rows * ow // width) * width * 4 <= 512 * 1024


def test_bad_shapes_and_weights_are_refused() -> None:
    with pytest.raises(ValueError, match="group=3 must divide"):
        ConvKernel(1, 4, 5, 5, 6, 3, 3, group=3)
    with pytest.raises(ValueError, match="empty output"):
        ConvKernel(1, 4, 2, 2, 4, 3, 3)
    with pytest.raises(ValueError, match="OIHW"):
        ConvKernel(1, 4, 5, 5, 6, 3, 3).pack_weights(np.zeros((6, 4, 3, 2), np.float32))
    with pytest.raises(ValueError, match="multiple of the vector width"):
        ConvKernel(
            1,
            4,
            5,
            5,
            6,
            3,
            3,
            schedule=ConvSchedule(oc_block=2, ow_block=10, kc_channels=1, nc=10, mc=2),
        )
    with pytest.raises(ValueError, match="oc_block=2 must be a positive multiple"):
        ConvKernel(
            1,
            4,
            5,
            5,
            6,
            3,
            3,
            schedule=ConvSchedule(
                oc_block=2, ow_block=3, kc_channels=1, nc=3, mc=2, vectorize="channels"
            ),
        )
    with pytest.raises(ValueError, match="exceed the 524288 B stack buffer"):
        ConvKernel(1, 4, 9, 5000, 4, 7, 7)
    with pytest.raises(ValueError, match="vectorize"):
        ConvKernel(
            1,
            4,
            5,
            5,
            6,
            3,
            3,
            schedule=ConvSchedule(
                oc_block=16, ow_block=16, kc_channels=1, nc=16, mc=16, vectorize="rows"
            ),
        )


@pytest.mark.slow
def test_random_convolutions_sweep() -> None:
    """60 random convolutions (shape, stride, pads, dilation, groups, batch, residual,
    orientation, schedule) in one module, against the float64 oracle."""
    rng = np.random.default_rng(2026)
    module = ir.Module("conv_sweep")
    cases = []
    while len(cases) < 60:
        width = int(rng.choice([4, 8, 16]))
        g = int(rng.choice([1, 1, 2, 3]))
        depthwise = rng.integers(4) == 0
        c = g * int(rng.integers(1, 12)) if not depthwise else int(rng.integers(1, 20))
        k = g * int(rng.integers(1, 12)) if not depthwise else c
        g = c if depthwise else g
        r, s = (int(x) for x in rng.integers(1, 6, 2))
        h, w = (int(x) for x in rng.integers(1, 30, 2))
        st = tuple(int(x) for x in rng.integers(1, 4, 2))
        dl = tuple(int(x) for x in rng.integers(1, 3, 2))
        pd = tuple(int(x) for x in rng.integers(0, 3, 4))
        sched = None
        if not depthwise and rng.integers(2):
            if rng.integers(2):
                mr = int(rng.integers(1, 9))
                nr = width * int(rng.integers(1, 4))
                sched = ConvSchedule(
                    oc_block=mr,
                    ow_block=nr,
                    kc_channels=int(rng.integers(1, 8)),
                    nc=nr * int(rng.integers(1, 4)),
                    mc=mr * int(rng.integers(1, 4)),
                    unroll=int(rng.integers(1, 4)),
                    loop_order=str(rng.choice(["nm", "mn"])),
                )
            else:
                pr = int(rng.integers(1, 8))
                ob = width * int(rng.integers(1, 3))
                sched = ConvSchedule(
                    oc_block=ob,
                    ow_block=pr,
                    kc_channels=int(rng.integers(1, 8)),
                    nc=pr * int(rng.integers(4, 12)),
                    mc=ob * int(rng.integers(1, 3)),
                    vectorize="channels",
                )
        try:
            kern = ConvKernel(
                int(rng.integers(1, 3)),
                c,
                h,
                w,
                k,
                r,
                s,
                strides=st,
                pads=pd,
                dilations=dl,
                group=g,
                vector_width=width,
                schedule=sched,
                residual=bool(rng.integers(2)),
            )
        except ValueError:  # an empty output: draw again
            continue
        epi = bool(rng.integers(2))
        kern.emit(module, f"s{len(cases)}", epilogue=relu if epi else None)
        cases.append((kern, epi, f"s{len(cases)}"))
    jit = Jitted(module)
    for kern, epi, name in cases:
        x = f32(rng, kern.N, kern.C, kern.H, kern.W)
        wt = f32(rng, kern.K, kern.C // kern.group, kern.R, kern.S)
        bias = f32(rng, kern.K) if rng.integers(2) else None
        y = np.full((kern.N, kern.K, kern.OH, kern.OW), np.nan, np.float32)
        args = [x, kern.pack_weights(wt), bias, y]
        res = f32(rng, *y.shape) if kern.residual else None
        if res is not None:
            args.append(res)
        jit.fn(name, len(args))(*args)
        ref = conv_reference(x, wt, bias, kern.strides, kern.pads, kern.dilations, kern.group)
        if res is not None:
            ref = ref + res
        if epi:
            ref = np.maximum(ref, 0)
        crs = (kern.C // kern.group) * kern.R * kern.S
        np.testing.assert_allclose(
            y, ref, rtol=1e-4, atol=1e-4 * np.sqrt(crs), err_msg=f"{name} {kern}"
        )
