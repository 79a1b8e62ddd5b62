"""Reference kernels for less common ops: triangular, one-hot, scatter/gather-nd, top-k,
normalisations (Lp, RMS, group, mean-variance), einsum, quantize/dequantize, NaN/Inf tests."""

from __future__ import annotations

from typing import Any

import numpy as np

from guard.compiler.ir import dtype_from_name, is_float, value_range
from guard.compiler.reference.tensor import cumulative

Attrs = dict[str, Any]
Xs = list[np.ndarray | None]


def _x(xs: Xs, i: int = 0) -> np.ndarray:
    x = xs[i]
    assert x is not None
    return x


def trilu(xs: Xs, a: Attrs) -> list[np.ndarray]:
    x = _x(xs)
    return [np.triu(x, a["k"]) if a["upper"] else np.tril(x, a["k"])]


def is_nan(xs: Xs, a: Attrs) -> list[np.ndarray]:
    return [np.isnan(_x(xs))]


def is_inf(xs: Xs, a: Attrs) -> list[np.ndarray]:
    x = _x(xs)
    pos = np.isposinf(x) if a.get("detect_positive", 1) else np.zeros(x.shape, bool)
    neg = np.isneginf(x) if a.get("detect_negative", 1) else np.zeros(x.shape, bool)
    return [pos | neg]


def one_hot(xs: Xs, a: Attrs) -> list[np.ndarray]:
    idx, depth, values = _x(xs), int(a["depth"]), _x(xs, 2)
    idx = np.where(idx < 0, idx + depth, idx).astype(np.int64)
    axis = a["axis"]
    eye = np.arange(depth) == idx[..., None]
    out = np.where(eye, values[1], values[0]).astype(values.dtype)
    return [np.moveaxis(out, -1, axis)]


def gather_nd(xs: Xs, a: Attrs) -> list[np.ndarray]:
    data, idx = _x(xs), _x(xs, 1).astype(np.int64)
    b = a.get("batch_dims", 0)
    batch_shape = data.shape[:b]
    nb = int(np.prod(batch_shape, dtype=np.int64))
    d = data.reshape((nb,) + data.shape[b:])
    ii = idx.reshape((nb, -1, idx.shape[-1]))
    outs = [d[k][tuple(ii[k].T)] for k in range(nb)]
    out = np.stack(outs)
    return [out.reshape(idx.shape[:-1] + data.shape[b + idx.shape[-1] :])]


_REDUCE = {"none": None, "add": np.add, "mul": np.multiply, "max": np.maximum, "min": np.minimum}


def scatter_elements(xs: Xs, a: Attrs) -> list[np.ndarray]:
    data, idx, upd = _x(xs).copy(), _x(xs, 1).astype(np.int64), _x(xs, 2)
    ax = a["axis"]
    idx = np.where(idx < 0, idx + data.shape[ax], idx)
    full = list(np.indices(idx.shape))
    full[ax] = idx
    fn = _REDUCE[a.get("reduction", "none")]
    if fn is None:
        data[tuple(full)] = upd
    else:
        fn.at(data, tuple(full), upd)
    return [data]


def scatter_nd(xs: Xs, a: Attrs) -> list[np.ndarray]:
    data, idx, upd = _x(xs).copy(), _x(xs, 1).astype(np.int64), _x(xs, 2)
    fn = _REDUCE[a.get("reduction", "none")]
    flat_idx = idx.reshape(-1, idx.shape[-1])
    flat_upd = upd.reshape((flat_idx.shape[0],) + upd.shape[idx.ndim - 1 :])
    for k, i in enumerate(flat_idx):
        t = tuple(i)
        data[t] = flat_upd[k] if fn is None else fn(data[t], flat_upd[k])
    return [data]


def top_k(xs: Xs, a: Attrs) -> list[np.ndarray]:
    x = _x(xs)
    k, ax = a["k"], a["axis"]
    # Stable: among equal values the lower index comes first, as the spec requires.
    # ~x reverses integer order exactly (-x would overflow at the dtype's minimum).
    key = (np.negative(x) if is_float(x.dtype) else np.invert(x)) if a.get("largest", 1) else x
    order = np.argsort(key, axis=ax, kind="stable")
    idx = np.take(order, np.arange(k), axis=ax)
    return [np.take_along_axis(x, idx, axis=ax), idx.astype(np.int64)]


def lp_norm(xs: Xs, a: Attrs) -> list[np.ndarray]:
    x = _x(xs)
    ax, p = a["axis"], a["p"]
    n = (
        np.sum(np.abs(x), axis=ax, keepdims=True)
        if p == 1
        else np.sqrt(np.sum(x * x, axis=ax, keepdims=True))
    )
    with np.errstate(all="ignore"):
        return [np.where(n == 0, 0, x / n).astype(x.dtype)]


def rms_norm(xs: Xs, a: Attrs) -> list[np.ndarray]:
    x, s = _x(xs), _x(xs, 1)
    axes = tuple(range(a["axis"], x.ndim))
    ms = np.mean(x.astype(np.float32) ** 2, axis=axes, keepdims=True)
    return [(x / np.sqrt(ms + a["epsilon"]) * s).astype(x.dtype)]


def group_norm(xs: Xs, a: Attrs) -> list[np.ndarray]:
    x, s, b = _x(xs), _x(xs, 1), _x(xs, 2)
    n, c = x.shape[:2]
    g = a["num_groups"]
    xg = x.reshape(n, g, -1).astype(np.float32)
    mean = xg.mean(axis=2, keepdims=True)
    var = xg.var(axis=2, keepdims=True)
    y = ((xg - mean) / np.sqrt(var + a["epsilon"])).reshape(x.shape)
    shape = (1, c) + (1,) * (x.ndim - 2)
    if s.size == g and g != c:  # opset 18: per-group scale and bias
        s, b = np.repeat(s, c // g), np.repeat(b, c // g)
    return [(y * s.reshape(shape) + b.reshape(shape)).astype(x.dtype)]


def mvn(xs: Xs, a: Attrs) -> list[np.ndarray]:
    x = _x(xs)
    axes = tuple(a["axes"])
    mean = x.mean(axis=axes, keepdims=True)
    std = np.sqrt(((x - mean) ** 2).mean(axis=axes, keepdims=True))
    return [((x - mean) / (std + 1e-9)).astype(x.dtype)]


def einsum(xs: Xs, a: Attrs) -> list[np.ndarray]:
    args = [x for x in xs if x is not None]
    dt = args[0].dtype
    if dt.kind == "V":  # ml_dtypes (bf16): einsum in float32, rounded once
        args = [x.astype(np.float32) for x in args]
    return [np.asarray(np.einsum(a["equation"], *args)).astype(dt, copy=False)]


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
    x, scale = _x(xs), _x(xs, 1)
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
    x, scale = _x(xs), _x(xs, 1)
    zp = xs[2] if len(xs) > 2 and xs[2] is not None else None
    xf = x.astype(np.float32)
    if zp is not None:
        xf = xf - _qshape(zp, x, a["axis"], a.get("block_size", 0)).astype(np.float32)
    return [(xf * _qshape(scale, x, a["axis"], a.get("block_size", 0))).astype(scale.dtype)]


def det(xs: Xs, a: Attrs) -> list[np.ndarray]:
    x = _x(xs)
    return [np.linalg.det(x).astype(x.dtype)]


KERNELS = {
    "Trilu": trilu, "IsNaN": is_nan, "IsInf": is_inf, "OneHot": one_hot,
    "GatherND": gather_nd, "ScatterElements": scatter_elements, "ScatterND": scatter_nd,
    "TopK": top_k, "CumProd": cumulative(np.cumprod, np.ones_like), "LpNormalization": lp_norm,
    "RMSNormalization": rms_norm, "GroupNormalization": group_norm,
    "MeanVarianceNormalization": mvn, "Einsum": einsum, "QuantizeLinear": quantize,
    "DequantizeLinear": dequantize, "Det": det,
}  # fmt: skip


def nll_loss(xs: Xs, a: Attrs) -> list[np.ndarray]:
    x, t = _x(xs), _x(xs, 1).astype(np.int64)
    w = xs[2] if len(xs) > 2 else None
    ignore = a.get("ignore_index")
    ignored = (t == ignore) if ignore is not None else np.zeros(t.shape, bool)
    safe = np.where(ignored, 0, t)
    picked = np.take_along_axis(x, safe[:, None], axis=1)[:, 0]
    wt = (w[safe] if w is not None else np.ones(t.shape, x.dtype)) * ~ignored
    loss = -picked * wt
    red = a.get("reduction", "mean")
    if red == "none":
        return [loss.astype(x.dtype)]
    if red == "sum":
        return [np.asarray(loss.sum(), x.dtype)]
    return [np.asarray(loss.sum() / wt.sum(), x.dtype)]


def conv_transpose(xs: Xs, a: Attrs) -> list[np.ndarray]:
    import itertools

    x, w = _x(xs), _x(xs, 1)
    b = xs[2] if len(xs) > 2 else None
    g = a["group"]
    k = x.ndim - 2
    n, c = x.shape[:2]
    mg = w.shape[1]
    ks, s, d = list(w.shape[2:]), a["strides"], a["dilations"]
    full = [
        s[i] * (x.shape[2 + i] - 1) + (ks[i] - 1) * d[i] + 1 + a["output_padding"][i]
        for i in range(k)
    ]
    y = np.zeros((n, g * mg, *full), np.float64)
    cg = c // g
    for gi in range(g):
        xg = x[:, gi * cg : (gi + 1) * cg].astype(np.float64)
        wg = w[gi * cg : (gi + 1) * cg].astype(np.float64)
        for offs in itertools.product(*(range(kk) for kk in ks)):
            contrib = np.tensordot(xg, wg[(slice(None), slice(None), *offs)], axes=([1], [0]))
            contrib = np.moveaxis(contrib, -1, 1)
            idx = (slice(None), slice(gi * mg, (gi + 1) * mg)) + tuple(
                slice(o * d[i], o * d[i] + s[i] * (x.shape[2 + i] - 1) + 1, s[i])
                for i, o in enumerate(offs)
            )
            y[idx] += contrib
    pads = a["pads"]
    # Negative pads (an output_shape larger than the full result) grow the output with zeros.
    grow = [(0, 0), (0, 0)] + [(max(-pads[i], 0), max(-pads[i + k], 0)) for i in range(k)]
    if any(g0 or g1 for g0, g1 in grow):
        y = np.pad(y, grow)
    crop = (slice(None), slice(None)) + tuple(
        slice(max(pads[i], 0), y.shape[2 + i] - max(pads[i + k], 0)) for i in range(k)
    )
    y = y[crop]
    if b is not None:
        y = y + b.reshape((1, -1) + (1,) * k)
    return [np.asarray(y.astype(x.dtype), order="C")]


KERNELS.update({"NegativeLogLikelihoodLoss": nll_loss, "ConvTranspose": conv_transpose})


def bit_cast(xs: Xs, a: Attrs) -> list[np.ndarray]:
    x = _x(xs)
    return [np.asarray(x, order="C").view(dtype_from_name(a["to"]))]


KERNELS["BitCast"] = bit_cast


def dft(xs: Xs, a: Attrs) -> list[np.ndarray]:
    """DFT over ``axis`` of a real ([..., 1]) or complex ([..., 2]) signal; output [..., 2]
    (inverse one-sided: the real signal, [..., 1]). float32 input transforms in complex64,
    as the spec's reference results were computed."""
    x = _x(xs)
    cdt = np.complex64 if x.dtype == np.float32 else np.complex128
    c = x[..., 0].astype(cdt)
    if x.shape[-1] == 2:
        c = c + np.asarray(1j, cdt) * x[..., 1].astype(cdt)
    ax = a["axis"]
    if a["inverse"] and a["onesided"]:
        y = np.fft.irfft(c, n=a["out_length"], axis=ax)
        return [y[..., None].astype(x.dtype)]
    n = a.get("length") or c.shape[ax]
    y = np.fft.ifft(c, n=n, axis=ax) if a["inverse"] else np.fft.fft(c, n=n, axis=ax)
    if a["onesided"]:
        y = np.take(y, np.arange(n // 2 + 1), axis=ax)
    return [np.stack([y.real, y.imag], axis=-1).astype(x.dtype)]


KERNELS["DFT"] = dft


def _zp(xs: Xs, i: int, like: np.ndarray) -> np.ndarray:
    z = xs[i] if len(xs) > i else None
    return np.zeros((), np.int64) if z is None else z.astype(np.int64)


def _requant(
    acc: np.ndarray, scale: np.ndarray, y_zp: np.ndarray | None, dt: np.dtype
) -> np.ndarray:
    q = np.rint(acc * scale)
    if y_zp is not None:
        q = q + y_zp.astype(np.float64)
    lo, hi = value_range(dt)
    return np.clip(q, lo, hi).astype(dt)


def matmul_integer(xs: Xs, a: Attrs) -> list[np.ndarray]:
    x, w = _x(xs).astype(np.int64), _x(xs, 1).astype(np.int64)
    azp, bzp = _zp(xs, 2, x), _zp(xs, 3, w)
    if azp.ndim == 1 and x.ndim >= 2:
        azp = azp.reshape(-1, 1)  # per-row zero point of A
    return [np.matmul(x - azp, w - bzp).astype(np.int32)]


def qlinear_matmul(xs: Xs, a: Attrs) -> list[np.ndarray]:
    qa, sa, za, qb, sb, zb, sy, zy = (xs + [None] * 8)[:8]
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
    acc = np.matmul(qa.astype(np.int64) - za_, qb.astype(np.int64) - zb_).astype(np.float64)
    scale = sa_ * sb.astype(np.float64) / sy.astype(np.float64)
    return [_requant(acc, scale, zy, qb.dtype if zy is None else zy.dtype)]


def conv_integer(xs: Xs, a: Attrs) -> list[np.ndarray]:
    from guard.compiler.reference.nn import conv

    x, w = _x(xs).astype(np.int64), _x(xs, 1).astype(np.int64)
    xz, wz = _zp(xs, 2, x), _zp(xs, 3, w)
    if wz.ndim == 1 and wz.size > 1:
        wz = wz.reshape((-1,) + (1,) * (w.ndim - 1))
    (y,) = conv([(x - xz).astype(np.float64), (w - wz).astype(np.float64)], a)
    return [np.rint(y).astype(np.int32)]


def qlinear_conv(xs: Xs, a: Attrs) -> list[np.ndarray]:
    from guard.compiler.reference.nn import conv

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
    return [_requant(acc, scale / sy.astype(np.float64), zy, x.dtype if zy is None else zy.dtype)]


def reverse_sequence(xs: Xs, a: Attrs) -> list[np.ndarray]:
    x, lens = _x(xs), _x(xs, 1).astype(np.int64)
    t_ax, b_ax = a["time_axis"], a["batch_axis"]
    y = x.copy()
    for b, n in enumerate(lens):
        src = [slice(None)] * x.ndim
        src[b_ax], src[t_ax] = b, slice(0, n)
        dst = list(src)
        dst[t_ax] = slice(n - 1, None, -1) if n > 0 else slice(0, 0)
        y[tuple(dst)] = x[tuple(src)]
    return [y]


KERNELS.update({
    "MatMulInteger": matmul_integer, "QLinearMatMul": qlinear_matmul, "ConvInteger": conv_integer,
    "QLinearConv": qlinear_conv, "ReverseSequence": reverse_sequence,
})  # fmt: skip
