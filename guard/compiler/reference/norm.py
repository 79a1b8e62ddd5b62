"""Reference kernels for normalizations: batch, instance, layer, group, RMS, Lp,
mean-variance and local response (LRN)."""

from __future__ import annotations

import numpy as np

from guard.compiler.reference.base import Attrs, Xs, arg


def _chan(v: np.ndarray, nd: int) -> np.ndarray:
    return v.reshape((1, -1) + (1,) * (nd - 2))


def batch_norm(xs: Xs, a: Attrs) -> list[np.ndarray]:
    x, s, b, m, v = xs[:5]
    assert x is not None and s is not None and b is not None and m is not None and v is not None
    inv = s / np.sqrt(v + np.asarray(a["epsilon"], v.dtype))
    y = (x - _chan(m, x.ndim)) * _chan(inv, x.ndim) + _chan(b, x.ndim)
    return [y.astype(x.dtype)]


def instance_norm(xs: Xs, a: Attrs) -> list[np.ndarray]:
    x, s, b = xs[:3]
    assert x is not None and s is not None and b is not None
    axes = tuple(range(2, x.ndim))
    mean = x.mean(axis=axes, keepdims=True)
    var = ((x - mean) ** 2).mean(axis=axes, keepdims=True)
    y = (x - mean) / np.sqrt(var + np.asarray(a["epsilon"], x.dtype)) * _chan(s, x.ndim) + _chan(
        b, x.ndim
    )
    return [y.astype(x.dtype)]


def lrn(xs: Xs, a: Attrs) -> list[np.ndarray]:
    x = xs[0]
    assert x is not None
    size = a["size"]
    c = x.shape[1]
    sq = x.astype(np.float64) ** 2
    lo, hi = (size - 1) // 2, size - 1 - (size - 1) // 2
    padded = np.pad(sq, [(0, 0), (lo, hi)] + [(0, 0)] * (x.ndim - 2))
    s = sum(padded[:, i : i + c] for i in range(size))
    y = x / (a["bias"] + a["alpha"] / size * s) ** a["beta"]
    return [y.astype(x.dtype)]


def layer_norm(xs: Xs, a: Attrs) -> list[np.ndarray]:
    x, s = xs[0], xs[1]
    b = xs[2] if len(xs) > 2 else None
    assert x is not None and s is not None
    axes = tuple(range(a["axis"], x.ndim))
    mean = x.mean(axis=axes, keepdims=True)
    d = x - mean
    var = (d * d).mean(axis=axes, keepdims=True)
    y = d / np.sqrt(var + np.asarray(a["epsilon"], x.dtype)) * s
    if b is not None:
        y = y + b
    return [y.astype(x.dtype)]


def lp_norm(xs: Xs, a: Attrs) -> list[np.ndarray]:
    x = arg(xs)
    ax, p = a["axis"], a["p"]
    n = (
        np.sum(np.abs(x), axis=ax, keepdims=True)
        if p == 1
        else np.sqrt(np.sum(x * x, axis=ax, keepdims=True))
    )
    with np.errstate(all="ignore"):
        return [np.where(n == 0, 0, x / n).astype(x.dtype)]


def rms_norm(xs: Xs, a: Attrs) -> list[np.ndarray]:
    x, s = arg(xs), arg(xs, 1)
    axes = tuple(range(a["axis"], x.ndim))
    ms = np.mean(x.astype(np.float32) ** 2, axis=axes, keepdims=True)
    return [(x / np.sqrt(ms + a["epsilon"]) * s).astype(x.dtype)]


def group_norm(xs: Xs, a: Attrs) -> list[np.ndarray]:
    x, s, b = arg(xs), arg(xs, 1), arg(xs, 2)
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
    x = arg(xs)
    axes = tuple(a["axes"])
    mean = x.mean(axis=axes, keepdims=True)
    std = np.sqrt(((x - mean) ** 2).mean(axis=axes, keepdims=True))
    return [((x - mean) / (std + 1e-9)).astype(x.dtype)]


KERNELS = {
    "BatchNormalization": batch_norm, "InstanceNormalization": instance_norm, "LRN": lrn,
    "LayerNormalization": layer_norm, "LpNormalization": lp_norm,
    "RMSNormalization": rms_norm, "GroupNormalization": group_norm,
    "MeanVarianceNormalization": mvn,
}  # fmt: skip
