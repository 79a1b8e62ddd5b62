"""Reference kernels for quantized ops: (de)quantization (per tensor, per axis, blocked)
and the integer and QLinear forms of MatMul and Conv (accumulated in int64/float64)."""

from __future__ import annotations

import numpy as np

from guard.compiler.ir.core import dtype_from_name, is_float, value_range
from guard.compiler.reference.base import Attrs, Xs, arg
from guard.compiler.reference.nn import conv


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


def _requant(
    acc: np.ndarray, scale: np.ndarray, y_zp: np.ndarray | None, dt: np.dtype, a: Attrs
) -> np.ndarray:
    """rint(acc * scale) + zp, clamped to [qmin, qmax] (a fused Relu/Clip; default the
    type's range)."""
    q = np.rint(acc * scale)
    if y_zp is not None:
        q = q + y_zp.astype(np.float64)
    lo, hi = value_range(dt)
    return np.clip(q, max(lo, a.get("qmin", lo)), min(hi, a.get("qmax", hi))).astype(dt)


def matmul_integer(xs: Xs, a: Attrs) -> list[np.ndarray]:
    x, w = arg(xs).astype(np.int64), arg(xs, 1).astype(np.int64)
    azp, bzp = _zp(xs, 2, x), _zp(xs, 3, w)
    if azp.ndim == 1 and x.ndim >= 2:
        azp = azp.reshape(-1, 1)  # per-row zero point of A
    return [np.matmul(x - azp, w - bzp).astype(np.int32)]


def qlinear_matmul(xs: Xs, a: Attrs) -> list[np.ndarray]:
    qa, sa, za, qb, sb, zb, sy, zy, bias = (xs + [None] * 9)[:9]
    assert (
        qa is not None and qb is not None and sa is not None and sb is not None and sy is not None
    )
    za_, zb_ = (np.zeros((), np.int64) if z is None else z.astype(np.int64) for z in (za, zb))
    if za_.ndim == 1 and qa.ndim >= 2:
        za_ = za_.reshape(-1, 1)
    sa_ = (
        sa.astype(np.float64).reshape(-1, 1)
        if sa.ndim == 1 and sa.size > 1
        else sa.astype(np.float64)
    )
    acc = np.matmul(qa.astype(np.int64) - za_, qb.astype(np.int64) - zb_)
    if bias is not None:  # int32 per output column, in the accumulator's units (sa*sb)
        acc = acc + bias.astype(np.int64)
    scale = sa_ * sb.astype(np.float64) / sy.astype(np.float64)
    return [_requant(acc.astype(np.float64), scale, zy, qb.dtype if zy is None else zy.dtype, a)]


def conv_integer(xs: Xs, a: Attrs) -> list[np.ndarray]:
    x, w = arg(xs).astype(np.int64), arg(xs, 1).astype(np.int64)
    xz, wz = _zp(xs, 2, x), _zp(xs, 3, w)
    if wz.ndim == 1 and wz.size > 1:
        wz = wz.reshape((-1,) + (1,) * (w.ndim - 1))
    (y,) = conv([(x - xz).astype(np.float64), (w - wz).astype(np.float64)], a)
    return [np.rint(y).astype(np.int32)]


def qlinear_conv(xs: Xs, a: Attrs) -> list[np.ndarray]:
    x, sx, zx, w, sw, zw, sy, zy = xs[:8]
    b = xs[8] if len(xs) > 8 else None
    assert x is not None and w is not None and sx is not None and sw is not None and sy is not None
    zx_ = np.zeros(()) if zx is None else zx.astype(np.float64)
    zw_ = np.zeros(()) if zw is None else zw.astype(np.float64)
    if zw_.ndim == 1 and zw_.size > 1:
        zw_ = zw_.reshape((-1,) + (1,) * (w.ndim - 1))
    (acc,) = conv([x.astype(np.float64) - zx_, w.astype(np.float64) - zw_], a)
    if b is not None:
        acc = acc + b.astype(np.float64).reshape((1, -1) + (1,) * (x.ndim - 2))
    sw_ = sw.astype(np.float64)
    scale = sx.astype(np.float64) * (
        sw_.reshape((1, -1) + (1,) * (x.ndim - 2)) if sw_.size > 1 else sw_
    )
    dt = x.dtype if zy is None else zy.dtype
    return [_requant(acc, scale / sy.astype(np.float64), zy, dt, a)]


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


KERNELS = {
    "QuantizeLinear": quantize, "DequantizeLinear": dequantize,
    "MatMulInteger": matmul_integer, "QLinearMatMul": qlinear_matmul,
    "ConvInteger": conv_integer, "QLinearConv": qlinear_conv,
    "DynamicQuantizeLinear": dynamic_quantize,
}  # fmt: skip
