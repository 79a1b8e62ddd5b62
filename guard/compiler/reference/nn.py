"""Reference kernels for neural-network ops: convolution, pooling, normalisation, GEMM.

Straightforward numpy: convolution is im2col over a strided window view followed by one
matmul per group, so it is the oracle, not the fast path.
"""

from __future__ import annotations

import itertools
from collections.abc import Iterator

import numpy as np
from numpy.lib.stride_tricks import sliding_window_view

from guard.compiler.ir.core import Node, Value, value_range
from guard.compiler.ir.shapes import _pool
from guard.compiler.reference.base import Attrs, Kernel, Xs, arg
from guard.compiler.reference.elementwise import run_program


def _windows(xp: np.ndarray, ks: list[int], strides: list[int], dil: list[int]) -> np.ndarray:
    """(N, C, *out, *k) view of windows over the spatial axes of a padded input."""
    k = len(ks)
    axes = tuple(range(2, 2 + k))
    span = [d * (kk - 1) + 1 for kk, d in zip(ks, dil, strict=True)]
    w = sliding_window_view(xp, span, axis=axes)
    idx = (slice(None), slice(None))
    idx += tuple(slice(None, None, s) for s in strides)
    idx += tuple(slice(None, None, d) for d in dil)
    return w[idx]


def _pad_spatial(
    x: np.ndarray, pads: list[int], value: float, extra: list[int] | None = None
) -> np.ndarray:
    k = x.ndim - 2
    extra = extra or [0] * k
    widths = [(0, 0), (0, 0)] + [(pads[i], pads[i + k] + extra[i]) for i in range(k)]
    if not any(a or b for a, b in widths):
        return x
    return np.pad(x, widths, constant_values=value)


def conv(xs: Xs, a: Attrs) -> list[np.ndarray]:
    x, w, b = xs[0], xs[1], xs[2] if len(xs) > 2 else None
    assert x is not None and w is not None
    g = a["group"]
    k = x.ndim - 2
    n, c = x.shape[:2]
    m = w.shape[0]
    cg, mg = c // g, m // g
    ks = list(w.shape[2:])
    if (
        g == 1
        and all(d == 1 for d in ks)
        and not any(a["pads"])
        and all(s == 1 for s in a["strides"])
    ):
        # 1x1, stride 1, no padding: one matmul over the flattened spatial dims.
        y = np.matmul(w.reshape(m, c), x.reshape(n, c, -1)).reshape((n, m) + x.shape[2:])
    else:
        win = _windows(_pad_spatial(x, a["pads"], 0.0), ks, a["strides"], a["dilations"])
        out_sp = win.shape[2 : 2 + k]
        # (N, C, *out, *k) -> (N, G, cg, *k, *out): patches as columns, channel-major rows.
        perm = (0, 1) + tuple(range(2 + k, 2 + 2 * k)) + tuple(range(2, 2 + k))
        cols = win.transpose(perm).reshape(n, g, cg * int(np.prod(ks)), int(np.prod(out_sp)))
        wm = w.reshape(g, mg, -1)
        y = np.matmul(wm[None], cols).reshape((n, m) + tuple(out_sp))
    if b is not None:
        y = y + b.reshape((1, m) + (1,) * k)
    return [np.ascontiguousarray(y.astype(x.dtype, copy=False))]


def _ceil_extra(x: np.ndarray, a: Attrs, out_shape: tuple[int, ...]) -> list[int]:
    k = x.ndim - 2
    pads, strides, ks = a["pads"], a["strides"], a["kernel_shape"]
    dil = a.get("dilations", [1] * k)
    extra = []
    for i in range(k):
        need = (out_shape[i] - 1) * strides[i] + dil[i] * (ks[i] - 1) + 1
        have = x.shape[2 + i] + pads[i] + pads[i + k]
        extra.append(max(0, need - have))
    return extra


def _pool_out(x: np.ndarray, a: Attrs) -> tuple[int, ...]:
    (shape, _), *_ = _pool(Node("MaxPool", ["x"], ["y"], a), [Value("x", x.shape, x.dtype)])
    return shape[2:]


def _taps(xp: np.ndarray, a: Attrs, out: tuple[int, ...]) -> Iterator[np.ndarray]:
    """Yield one strided view per kernel offset: each is the (N, C, *out) tensor of the
    inputs that offset reads (faster than reducing a window view)."""
    k = xp.ndim - 2
    strides, ks = a["strides"], a["kernel_shape"]
    dil = a.get("dilations", [1] * k)
    for offs in itertools.product(*(range(kk) for kk in ks)):
        idx = (slice(None), slice(None)) + tuple(
            slice(o * d, o * d + s * (n - 1) + 1, s)
            for o, d, s, n in zip(offs, dil, strides, out, strict=True)
        )
        yield xp[idx]


def max_pool(xs: Xs, a: Attrs) -> list[np.ndarray]:
    x = xs[0]
    assert x is not None
    out = _pool_out(x, a)
    lo = value_range(x.dtype)[0]
    xp = _pad_spatial(x, a["pads"], lo, _ceil_extra(x, a, out))
    y = None
    for tap in _taps(xp, a, out):
        y = tap.copy() if y is None else np.maximum(y, tap, out=y)
    assert y is not None
    return [y.astype(x.dtype, copy=False)]


def average_pool(xs: Xs, a: Attrs) -> list[np.ndarray]:
    x = xs[0]
    assert x is not None
    k = x.ndim - 2
    out = _pool_out(x, a)
    extra = _ceil_extra(x, a, out)
    acc_t = np.float64 if x.dtype == np.float64 else np.float32
    s = np.zeros(x.shape[:2] + tuple(out), acc_t)
    for tap in _taps(_pad_spatial(x, a["pads"], 0.0, extra), a, out):
        s += tap
    ones = np.ones((1, 1) + x.shape[2:], dtype=np.float32)
    # count_include_pad counts explicit pads but never the ceil_mode overhang.
    if a.get("count_include_pad", 0):
        cnt_src = _pad_spatial(ones, a["pads"], 1.0, None)
        cnt_src = _pad_spatial(cnt_src, [0] * (2 * k), 0.0, extra)
    else:
        cnt_src = _pad_spatial(ones, a["pads"], 0.0, extra)
    cnt = np.zeros((1, 1) + tuple(out), np.float32)
    for tap in _taps(cnt_src, a, out):
        cnt += tap
    return [(s / cnt).astype(x.dtype)]


def lp_pool(xs: Xs, a: Attrs) -> list[np.ndarray]:
    x = xs[0]
    assert x is not None
    k = x.ndim - 2
    p = a.get("p", 2)
    out = _pool_out(x, a)
    win = _windows(
        _pad_spatial(np.abs(x) ** p, a["pads"], 0.0, _ceil_extra(x, a, out)),
        a["kernel_shape"],
        a["strides"],
        a.get("dilations", [1] * k),
    )
    win = win[(slice(None), slice(None)) + tuple(slice(0, o) for o in out)]
    return [(win.sum(axis=tuple(range(-k, 0))) ** (1.0 / p)).astype(x.dtype)]


def global_average_pool(xs: Xs, a: Attrs) -> list[np.ndarray]:
    x = xs[0]
    assert x is not None
    return [x.mean(axis=tuple(range(2, x.ndim)), keepdims=True).astype(x.dtype)]


def global_max_pool(xs: Xs, a: Attrs) -> list[np.ndarray]:
    x = xs[0]
    assert x is not None
    return [x.max(axis=tuple(range(2, x.ndim)), keepdims=True)]


def gemm(xs: Xs, a: Attrs) -> list[np.ndarray]:
    A, B, C = xs[0], xs[1], xs[2] if len(xs) > 2 else None
    assert A is not None and B is not None
    if a.get("transA", 0):
        A = A.T
    if a.get("transB", 0):
        B = B.T
    y = A @ B
    if a.get("alpha", 1.0) != 1.0:
        y = y * np.asarray(a["alpha"], y.dtype)
    if C is not None:
        y = y + (C if a.get("beta", 1.0) == 1.0 else C * np.asarray(a["beta"], C.dtype))
    return [y.astype(A.dtype, copy=False)]


def matmul(xs: Xs, a: Attrs) -> list[np.ndarray]:
    A, B = xs[0], xs[1]
    assert A is not None and B is not None
    # ml_dtypes (bf16) matmul may widen; the IR types the result like A.
    return [np.asarray(np.matmul(A, B)).astype(A.dtype, copy=False)]


def softmax(xs: Xs, a: Attrs) -> list[np.ndarray]:
    x = xs[0]
    assert x is not None
    e = np.exp(x - x.max(axis=a["axis"], keepdims=True))
    return [(e / e.sum(axis=a["axis"], keepdims=True)).astype(x.dtype)]


def log_softmax(xs: Xs, a: Attrs) -> list[np.ndarray]:
    x = xs[0]
    assert x is not None
    z = x - x.max(axis=a["axis"], keepdims=True)
    return [(z - np.log(np.exp(z).sum(axis=a["axis"], keepdims=True))).astype(x.dtype)]


def hardmax(xs: Xs, a: Attrs) -> list[np.ndarray]:
    x = xs[0]
    assert x is not None
    idx = np.expand_dims(np.argmax(x, axis=a["axis"]), a["axis"])
    y = np.zeros_like(x)
    np.put_along_axis(y, idx, 1, axis=a["axis"])
    return [y]


def nll_loss(xs: Xs, a: Attrs) -> list[np.ndarray]:
    x, t = arg(xs), arg(xs, 1).astype(np.int64)
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
    x, w = arg(xs), arg(xs, 1)
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
            tap: tuple[slice | int, ...] = (slice(None), slice(None), *offs)
            contrib = np.tensordot(xg, wg[tap], axes=([1], [0]))
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


ANCHORS = {"FusedConv": conv, "FusedGemm": gemm, "FusedMatMul": matmul}


def _fused(anchor_op: str) -> Kernel:
    def k(xs: Xs, a: Attrs) -> list[np.ndarray]:
        n = a["anchor_inputs"]
        (acc,) = ANCHORS[anchor_op](xs[:n], a)
        return [run_program(a["program"], xs, acc)]

    return k


KERNELS = {
    "Conv": conv,
    "MaxPool": max_pool,
    "AveragePool": average_pool,
    "LpPool": lp_pool,
    "GlobalAveragePool": global_average_pool,
    "GlobalMaxPool": global_max_pool,
    "Gemm": gemm,
    "MatMul": matmul,
    "Softmax": softmax,
    "LogSoftmax": log_softmax,
    "Hardmax": hardmax,
    "ConvTranspose": conv_transpose,
    "NegativeLogLikelihoodLoss": nll_loss,
    **{op: _fused(op) for op in ANCHORS},
}
