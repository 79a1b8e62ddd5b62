"""Reference kernel for Resize (and Upsample): separable per-axis interpolation.

For each resized axis, every output index x maps to an input coordinate through the
``coordinate_transformation_mode`` (half_pixel: (x + 0.5) / scale - 0.5, asymmetric:
x / scale, align_corners: x * (in - 1) / (out - 1), ...), then ``nearest`` rounds it
(``nearest_mode``), ``linear`` blends the two neighbours and ``cubic`` the four (Keys,
coefficient ``cubic_coeff_a``); out-of-range taps take the edge value, or are dropped and
the weights renormalised with ``exclude_outside``. ``tf_crop_and_resize`` samples the
``roi`` box and writes ``extrapolation_value`` outside the input.
"""

from __future__ import annotations

import itertools
from collections.abc import Mapping

import numpy as np

from guard.compiler.ir.core import AttrValue
from guard.compiler.reference.base import Attrs


def _coords(mode: str, n_out: int, n_in: int, scale: float, roi: tuple[float, float]) -> np.ndarray:
    x = np.arange(n_out, dtype=np.float64)
    # The spec's length_resized is in * scale, unrounded (it differs from n_out when scales
    # were given and in * scale is not an integer).
    n_res = n_in * scale
    if mode == "half_pixel":
        return (x + 0.5) / scale - 0.5
    if mode == "pytorch_half_pixel":
        return (x + 0.5) / scale - 0.5 if n_res > 1 else np.zeros(n_out)
    if mode == "align_corners":
        return x * (n_in - 1) / (n_res - 1) if n_res > 1 else np.zeros(n_out)
    if mode == "asymmetric":
        return x / scale
    if mode == "tf_half_pixel_for_nn":
        return (x + 0.5) / scale
    if mode == "half_pixel_symmetric":
        adj = n_out / (scale * n_in)
        center = n_in / 2
        return center * (1 - adj) + (x + 0.5) / scale - 0.5
    if mode == "tf_crop_and_resize":
        start, end = roi
        if n_res > 1:
            return start * (n_in - 1) + x * (end - start) * (n_in - 1) / (n_res - 1)
        return np.full(n_out, 0.5 * (start + end) * (n_in - 1))
    raise ValueError(f"unknown coordinate_transformation_mode {mode!r}")


def _nearest(c: np.ndarray, mode: str) -> np.ndarray:
    if mode == "round_prefer_floor":
        return np.where(c - np.floor(c) == 0.5, np.floor(c), np.round(c))
    if mode == "round_prefer_ceil":
        return np.where(c - np.floor(c) == 0.5, np.ceil(c), np.round(c))
    if mode == "floor":
        return np.floor(c)
    return np.ceil(c)


def _cubic(t: np.ndarray, a: float) -> np.ndarray:
    t = np.abs(t)
    return np.where(
        t <= 1, ((a + 2) * t - (a + 3)) * t * t + 1,
        np.where(t < 2, ((a * t - 5 * a) * t + 8 * a) * t - 4 * a, 0.0),
    )  # fmt: skip


def _weights(c: np.ndarray, n_in: int, a: Mapping[str, AttrValue]) -> tuple[np.ndarray, np.ndarray]:
    """(indices [n_out, taps], weights [n_out, taps]) for one axis."""
    mode = a["mode"]
    if mode == "nearest":
        idx = _nearest(c, a["nearest_mode"]).astype(np.int64)[:, None]
        return idx, np.ones(idx.shape)
    if mode == "linear":
        cc = (
            np.clip(c, 0, n_in - 1)
            if a["coordinate_transformation_mode"] != "tf_crop_and_resize"
            else c
        )
        lo = np.floor(cc)
        frac = cc - lo
        idx = np.stack([lo, lo + 1], axis=1).astype(np.int64)
        w = np.stack([1 - frac, frac], axis=1)
        return idx, w
    lo = np.floor(c)
    idx = (lo[:, None] + np.arange(-1, 3)[None]).astype(np.int64)
    w = _cubic(c[:, None] - idx, a["cubic_coeff_a"])
    if a["exclude_outside"]:
        w = np.where((idx < 0) | (idx >= n_in), 0.0, w)
        w = w / w.sum(axis=1, keepdims=True)
    return idx, w


def axis_taps(
    a: Mapping[str, AttrValue], in_shape: tuple[int, ...], ax: int
) -> tuple[np.ndarray, np.ndarray, np.ndarray] | None:
    """Axis ``ax`` of a Resize as taps: (input indices [n_out, taps], clipped into the
    input; weights [n_out, taps], float64; outside [n_out], the coordinates past the
    input's edges), or None when the axis is not resized. The generated code reads the
    same taps (guard.compiler.codegen.emit_resize)."""
    n_in, n_out = in_shape[ax], a["out_shape"][ax]
    scale = a["scales"][ax]
    roi = (a["roi"][ax], a["roi"][ax + len(in_shape)]) if a.get("roi") else (0.0, 1.0)
    if (
        n_in == n_out
        and scale == 1.0
        and a["coordinate_transformation_mode"] != "tf_crop_and_resize"
    ):
        return None
    c = _coords(a["coordinate_transformation_mode"], n_out, n_in, scale, roi)
    idx, w = _weights(c, n_in, a)
    return np.clip(idx, 0, n_in - 1), w, (c < 0) | (c > n_in - 1)


def resize(xs: list[np.ndarray | None], a: Attrs) -> list[np.ndarray]:
    x = xs[0]
    assert x is not None
    y = x.astype(np.float64)
    crop = a["coordinate_transformation_mode"] == "tf_crop_and_resize"
    for ax in range(x.ndim):
        got = axis_taps(a, x.shape, ax)
        if got is None:
            continue
        idx, w, outside = got
        n_out = idx.shape[0]
        taps = np.take(y, idx, axis=ax)  # [..., n_out, taps, ...]
        shape = [1] * taps.ndim
        shape[ax], shape[ax + 1] = w.shape
        y = (taps * w.reshape(shape)).sum(axis=ax + 1)
        if crop:
            mask_shape = [1] * y.ndim
            mask_shape[ax] = n_out
            y = np.where(outside.reshape(mask_shape), a["extrapolation_value"], y)
    if x.dtype.kind in "iu":
        y = np.rint(y)
    return [y.astype(x.dtype)]


def _reflect(x: np.ndarray, lo: float, hi: float) -> np.ndarray:
    rng = hi - lo
    if rng <= 0:
        return np.full_like(x, lo)
    below, above = x < lo, x > hi
    d = np.where(below, lo - x, np.where(above, x - hi, 0.0))
    n = np.floor(d / rng)
    r = d - n * rng
    even = (n % 2) == 0
    return np.where(
        below, np.where(even, lo + r, hi - r), np.where(above, np.where(even, hi - r, lo + r), x)
    )


def grid_sample(xs: list[np.ndarray | None], a: Attrs) -> list[np.ndarray]:
    """GridSample: sample X [N, C, *spatial] at grid [N, *out, r] (last dim x, y, z: the
    spatial dims in reverse). Coordinates in [-1, 1] unnormalise by ``align_corners``;
    ``padding_mode`` zeros / border / reflection; ``mode`` nearest / linear / cubic."""

    x, grid = xs[0], xs[1]
    assert x is not None and grid is not None
    r = x.ndim - 2
    sizes = x.shape[2:]
    align, pad, mode = a["align_corners"], a["padding_mode"], a["mode"]
    pos = []
    for i in range(r):
        g = grid[..., r - 1 - i].astype(np.float64)
        p = (g + 1) / 2 * (sizes[i] - 1) if align else ((g + 1) * sizes[i] - 1) / 2
        if pad == "border":
            p = np.clip(p, 0, sizes[i] - 1)
        elif pad == "reflection":
            p = _reflect(p, 0, sizes[i] - 1) if align else _reflect(p, -0.5, sizes[i] - 0.5)
        pos.append(p)
    n_idx = np.arange(x.shape[0]).reshape((-1,) + (1,) * (grid.ndim - 2))
    xd = x.astype(np.float64)

    def fetch(idx: list[np.ndarray]) -> np.ndarray:
        ok = np.ones(idx[0].shape, bool)
        clipped = []
        for i, ii in enumerate(idx):
            ok &= (ii >= 0) & (ii < sizes[i])
            clipped.append(np.clip(ii, 0, sizes[i] - 1))
        v = xd[(n_idx, slice(None), *clipped)]  # [N, *out, C]
        if pad == "zeros":
            v = v * ok[..., None]
        return v

    out: np.ndarray | float
    if mode == "nearest":
        out = fetch([np.rint(p).astype(np.int64) for p in pos])
    else:
        lo = [np.floor(p).astype(np.int64) for p in pos]
        taps = (0, 1) if mode == "linear" else (-1, 0, 1, 2)
        out = 0.0
        for offs in itertools.product(taps, repeat=r):
            idx = [lo[i] + o for i, o in enumerate(offs)]
            w = np.ones(pos[0].shape)
            for i in range(r):
                dist = pos[i] - idx[i]
                w = w * (1 - np.abs(dist) if mode == "linear" else _cubic(dist, -0.75))
            out = out + fetch(idx) * w[..., None]
    return [np.moveaxis(np.asarray(out), -1, 1).astype(x.dtype)]
