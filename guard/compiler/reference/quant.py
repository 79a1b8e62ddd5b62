"""Reference kernels for quantized ops: (de)quantization (per tensor, per axis, blocked)
and the integer and QLinear forms of MatMul and Conv.

The integer ops accumulate exactly and wrap to int32; QLinearConv and QLinearMatMul then
requantise as onnxruntime does, which generated code matches bit for bit on every ISA
(:func:`requantize`): multiplier ``float32(float32(sx * sw) / sy)`` per output channel,
``float32(acc) * multiplier`` in float32, round half to even, ``+ y_zero_point``, clamp to
``[qmin, qmax]`` (attributes for a fused Relu/Clip, else the output type's range)."""

from __future__ import annotations

from typing import Any

import numpy as np

from guard.compiler.ir.core import dtype_from_name, is_float, value_range
from guard.compiler.reference.base import Attrs, Xs, arg
from guard.compiler.reference.elementwise import run_program
from guard.compiler.reference.nn import conv, conv_transpose


def _qshape(scale: np.ndarray, x: np.ndarray, axis: int, block: int = 0) -> np.ndarray:
    """Scale/zero point broadcastable against x: scalar, per axis, or blocked (the same
    rank as x, each element covering ``block`` consecutive elements along ``axis``)."""
    if block and scale.ndim == x.ndim:
        return np.repeat(scale, block, axis=axis).take(np.arange(x.shape[axis]), axis=axis)
    if scale.ndim == 0 or scale.size == 1:
        return scale.reshape(())
    shape = [1] * x.ndim
    shape[axis] = scale.size
    return scale.reshape(shape)


def quantize(xs: Xs, a: Attrs) -> list[np.ndarray]:
    x, scale = arg(xs), arg(xs, 1)
    zp = xs[2] if len(xs) > 2 and xs[2] is not None else None
    dt = dtype_from_name(a["to"])
    q = x.astype(np.float32) / _qshape(scale, x, a["axis"], a.get("block_size", 0)).astype(
        np.float32
    )
    if is_float(dt):  # float8 targets: a saturating cast, no rounding to integers
        if zp is not None:
            q = q + _qshape(zp, x, a["axis"], a.get("block_size", 0)).astype(np.float32)
        lo, hi = value_range(dt)
        return [np.clip(q, lo, hi).astype(dt)]
    q = np.rint(q)
    if zp is not None:
        q = q + _qshape(zp, x, a["axis"], a.get("block_size", 0)).astype(np.float32)
    lo, hi = value_range(dt)
    return [np.clip(q, lo, hi).astype(dt)]


def dequantize(xs: Xs, a: Attrs) -> list[np.ndarray]:
    x, scale = arg(xs), arg(xs, 1)
    zp = xs[2] if len(xs) > 2 and xs[2] is not None else None
    xf = x.astype(np.float32)
    if zp is not None:
        xf = xf - _qshape(zp, x, a["axis"], a.get("block_size", 0)).astype(np.float32)
    return [(xf * _qshape(scale, x, a["axis"], a.get("block_size", 0))).astype(scale.dtype)]


def _zp(xs: Xs, i: int, like: np.ndarray) -> np.ndarray:
    z = xs[i] if len(xs) > i else None
    return np.zeros((), np.int64) if z is None else z.astype(np.int64)


def multiplier(sx: np.ndarray, sw: np.ndarray, sy: np.ndarray) -> np.ndarray:
    """The requantisation multiplier ``float32(float32(sx * sw) / sy)``, in float32 ops
    (per output channel when ``sw`` is), as onnxruntime computes it."""
    sw32 = np.asarray(sw, np.float32)
    prod = np.asarray(sx, np.float32) * sw32
    return np.asarray(prod / np.asarray(sy, np.float32), np.float32)


def out_range(a: Attrs, dt: np.dtype) -> tuple[int, int]:
    """The output clamp ``[qmin, qmax]``: the attributes (a fused Relu/Clip) or the type's."""
    lo, hi = value_range(dt)
    return int(a.get("qmin", lo)), int(a.get("qmax", hi))


def requantize(
    acc: np.ndarray, mult: np.ndarray, y_zp: np.ndarray | None, dt: np.dtype, a: Attrs
) -> np.ndarray:
    """The int32 accumulator to the output type, bit for bit what the generated code does:
    ``clip(rint_half_even(float32(acc) * mult) + y_zp, qmin, qmax)`` with a float32
    multiply (``acc`` wraps to int32 first, as int32 accumulation does)."""
    acc32 = np.asarray(acc, np.int64).astype(np.int32)
    q = np.rint(acc32.astype(np.float32) * np.asarray(mult, np.float32)).astype(np.float64)
    if y_zp is not None:
        q = q + y_zp.astype(np.float64)
    lo, hi = out_range(a, dt)
    return np.clip(q, lo, hi).astype(dt)


def matmul_integer(xs: Xs, a: Attrs) -> list[np.ndarray]:
    x, w = arg(xs).astype(np.int64), arg(xs, 1).astype(np.int64)
    azp, bzp = _zp(xs, 2, x), _zp(xs, 3, w)
    if azp.ndim == 1 and x.ndim >= 2:
        azp = azp.reshape(-1, 1)  # per-row zero point of A
    return [np.matmul(x - azp, w - bzp).astype(np.int32)]


def qlinear_matmul(xs: Xs, a: Attrs) -> list[np.ndarray]:
    """QLinearMatMul, with the optional 9th input: an int32 bias per output column (a
    folded DQ -> Gemm -> Q), added to the accumulator before requantisation."""
    qa, sa, za, qb, sb, zb, sy, zy, bias = (xs + [None] * 9)[:9]
    assert (
        qa is not None and qb is not None and sa is not None and sb is not None and sy is not None
    )
    za_, zb_ = (np.zeros((), np.int64) if z is None else z.astype(np.int64) for z in (za, zb))
    if za_.ndim == 1 and qa.ndim >= 2:
        za_ = za_.reshape(-1, 1)
    sa_ = sa.reshape(-1, 1) if sa.ndim == 1 and sa.size > 1 else sa
    acc = np.matmul(qa.astype(np.int64) - za_, qb.astype(np.int64) - zb_)
    if bias is not None:
        acc = acc + bias.astype(np.int64)
    dt = qb.dtype if zy is None else zy.dtype
    return [requantize(acc, multiplier(sa_, sb, sy), zy, dt, a)]


def _conv_acc(x: np.ndarray, zx: Any, w: np.ndarray, zw: Any, a: Attrs) -> np.ndarray:
    """The exact integer convolution of ``(x - zx)`` and ``(w - zw)`` (per output channel
    zw), int64 (float64 sums of integers below 2**53 are exact)."""
    zx_ = np.zeros(()) if zx is None else zx.astype(np.float64)
    zw_ = np.zeros(()) if zw is None else zw.astype(np.float64)
    if zw_.ndim == 1 and zw_.size > 1:
        zw_ = zw_.reshape((-1,) + (1,) * (w.ndim - 1))
    (acc,) = conv([x.astype(np.float64) - zx_, w.astype(np.float64) - zw_], a)
    return np.rint(acc).astype(np.int64)


def conv_integer(xs: Xs, a: Attrs) -> list[np.ndarray]:
    x, w = arg(xs), arg(xs, 1)
    zx = xs[2] if len(xs) > 2 else None
    zw = xs[3] if len(xs) > 3 else None
    return [_conv_acc(x, zx, w, zw, a).astype(np.int32)]


def conv_transpose_integer(xs: Xs, a: Attrs) -> list[np.ndarray]:
    """The exact integer ConvTranspose of ``(x - zx)`` and ``(w - zw)`` (zw per tensor or
    per output channel: axis 1 of the weights), int32; guard's own op, made by
    passes/fold_integer_conv.py."""
    x, w = arg(xs), arg(xs, 1)
    zx = np.zeros(()) if len(xs) < 3 or xs[2] is None else xs[2].astype(np.float64)
    zw = np.zeros(()) if len(xs) < 4 or xs[3] is None else xs[3].astype(np.float64)
    if zw.size > 1:
        zw = zw.reshape((1, -1) + (1,) * (w.ndim - 2))
    (acc,) = conv_transpose([x.astype(np.float64) - zx, w.astype(np.float64) - zw], a)
    return [np.rint(acc).astype(np.int64).astype(np.int32)]


def qlinear_conv(xs: Xs, a: Attrs) -> list[np.ndarray]:
    x, sx, zx, w, sw, zw, sy, zy = xs[:8]
    b = xs[8] if len(xs) > 8 else None
    assert x is not None and w is not None and sx is not None and sw is not None and sy is not None
    acc = _conv_acc(x, zx, w, zw, a)
    if b is not None:
        acc = acc + b.astype(np.int64).reshape((1, -1) + (1,) * (x.ndim - 2))
    mult = multiplier(sx, sw, sy)
    if mult.size > 1:
        mult = mult.reshape((1, -1) + (1,) * (x.ndim - 2))
    return [requantize(acc, mult, zy, x.dtype if zy is None else zy.dtype, a)]


def dynamic_quantize(xs: Xs, a: Attrs) -> list[np.ndarray]:
    """ONNX's DynamicQuantizeLinear, every step in float32 as onnx's reference writes it:
    the range [min(0, min x), max(0, max x)] onto u8 (scale 1/255 when that range is
    empty), the zero point clamped then rounded half to even. A NaN in x makes the range
    NaN; the NaNs this leaves become 0 (numpy's cast on x86, which onnx's reference
    inherits)."""
    x = arg(xs).astype(np.float32)
    hi = np.float32(np.maximum(np.float32(0), x.max(initial=np.float32(0))))
    lo = np.float32(np.minimum(np.float32(0), x.min(initial=np.float32(0))))
    scale = np.float32(np.float32(1.0) if hi == lo else np.float32(hi - lo)) / np.float32(255)
    with np.errstate(invalid="ignore"):
        zp_f = np.rint(np.clip(np.float32(0) - lo / scale, np.float32(0), np.float32(255)))
        q = np.clip(np.rint(x / scale) + zp_f, np.float32(0), np.float32(255))
    q = np.where(np.isnan(q), np.float32(0), q)
    zp = np.uint8(0) if np.isnan(zp_f) else np.uint8(zp_f)
    return [q.astype(np.uint8), np.asarray(scale, np.float32), np.asarray(zp, np.uint8)]


def _fused(anchor: Any) -> Any:
    """``FusedConvInteger`` / ``FusedConvTransposeInteger`` (passes/fuse_integer_epilogue.py):
    the integer conv on the first ``anchor_inputs`` inputs, then the chain's program on its
    int32 accumulator (``"acc"``) and the constants after them: the two nodes' references
    composed."""

    def k(xs: Xs, a: Attrs) -> list[np.ndarray]:
        (acc,) = anchor(list(xs[: a["anchor_inputs"]]), a)
        return [run_program(a["program"], xs, acc)]

    return k


KERNELS = {
    "QuantizeLinear": quantize, "DequantizeLinear": dequantize,
    "MatMulInteger": matmul_integer, "QLinearMatMul": qlinear_matmul,
    "ConvInteger": conv_integer, "QLinearConv": qlinear_conv,
    "ConvTransposeInteger": conv_transpose_integer,
    "DynamicQuantizeLinear": dynamic_quantize,
    "FusedConvInteger": _fused(conv_integer),
    "FusedConvTransposeInteger": _fused(conv_transpose_integer),
}  # fmt: skip
