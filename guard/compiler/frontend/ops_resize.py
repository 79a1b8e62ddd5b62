"""Converters for Resize and Upsample: scales/sizes/roi/axes resolved into attributes
(``scales`` and ``out_shape`` per axis), the kernel is reference/resize.py."""

from __future__ import annotations

from typing import Any

import numpy as np

from guard.compiler.frontend.context import Converter, ImportContext
from guard.compiler.ir.core import Attrs


def _resize_common(
    ctx: ImportContext,
    ins: list[str],
    outs: list[str],
    *,
    scales: list[float] | None,
    sizes: list[int] | None,
    roi: list[float] | None,
    attrs: Attrs,
    axes: list[int] | None = None,
    policy: str = "stretch",
) -> None:
    x = ctx.type(ins[0])
    r = len(x.shape)
    if axes:
        axes = [a % r for a in axes]
        full_s, full_z = [1.0] * r, list(x.shape)
        for k, a in enumerate(axes):
            if scales:
                full_s[a] = scales[k]
            if sizes:
                full_z[a] = sizes[k]
        scales = full_s if scales else None
        sizes = full_z if sizes else None
        if roi:
            full_roi = [0.0] * r + [1.0] * r
            for k, a in enumerate(axes):
                full_roi[a], full_roi[a + r] = roi[k], roi[k + len(axes)]
            roi = full_roi
    if sizes:
        if policy != "stretch":
            ratios = [sizes[i] / x.shape[i] for i in range(r) if (not axes or i in axes)]
            s = min(ratios) if policy == "not_larger" else max(ratios)
            sizes = [
                int(np.floor(s * x.shape[i] + 0.5)) if (not axes or i in axes) else x.shape[i]
                for i in range(r)
            ]
            scales = [s if (not axes or i in axes) else 1.0 for i in range(r)]
        else:
            scales = [sizes[i] / x.shape[i] for i in range(r)]
        out = list(sizes)
    else:
        assert scales is not None
        out = [int(np.floor(x.shape[i] * scales[i])) for i in range(r)]
    attrs = {
        **attrs,
        "scales": [float(s) for s in scales],
        "out_shape": out,
        "roi": [float(v) for v in roi] if roi else None,
    }
    ctx.inferred[outs[0]] = (tuple(out), x.dtype)
    ctx.emit("Resize", ins[:1], attrs, outs)


def resize(
    ctx: ImportContext,
    ins: list[str],
    outs: list[str],
    antialias: int = 0,
    axes: list[int] | None = None,
    coordinate_transformation_mode: str = "half_pixel",
    cubic_coeff_a: float = -0.75,
    exclude_outside: int = 0,
    extrapolation_value: float = 0.0,
    keep_aspect_ratio_policy: str = "stretch",
    mode: str = "nearest",
    nearest_mode: str = "round_prefer_floor",
) -> None:
    if antialias:
        raise ctx.error("Resize with antialias=1 is not supported", hint="Export with antialias=0.")

    def opt(i: int, what: str) -> list[Any] | None:
        if len(ins) > i and ins[i]:
            v = np.asarray(ctx.const(ins[i], what)).reshape(-1).tolist()
            return v or None
        return None

    if ctx.opset < 11:  # Resize-10: (X, scales), asymmetric coordinates
        coordinate_transformation_mode = "asymmetric"
        nearest_mode = "floor" if mode == "nearest" else nearest_mode
        roi, scales, sizes = None, opt(1, "scales"), None
    else:
        roi, scales, sizes = opt(1, "roi"), opt(2, "scales"), opt(3, "sizes")
    attrs = {
        "mode": mode,
        "coordinate_transformation_mode": coordinate_transformation_mode,
        "nearest_mode": nearest_mode,
        "cubic_coeff_a": cubic_coeff_a,
        "exclude_outside": exclude_outside,
        "extrapolation_value": extrapolation_value,
    }
    _resize_common(
        ctx,
        ins,
        outs,
        scales=scales,
        sizes=[int(s) for s in sizes] if sizes else None,
        roi=roi,
        attrs=attrs,
        axes=axes,
        policy=keep_aspect_ratio_policy,
    )


def upsample(
    ctx: ImportContext,
    ins: list[str],
    outs: list[str],
    mode: str = "nearest",
    scales: list[float] | None = None,
) -> None:
    if len(ins) > 1 and ins[1]:
        scales = np.asarray(ctx.const(ins[1], "scales")).reshape(-1).tolist()
    attrs = {
        "mode": mode,
        "coordinate_transformation_mode": "asymmetric",
        "nearest_mode": "floor",
        "cubic_coeff_a": -0.75,
        "exclude_outside": 0,
        "extrapolation_value": 0.0,
    }
    _resize_common(ctx, ins, outs, scales=scales, sizes=None, roi=None, attrs=attrs)


CONVERTERS: dict[str, dict[int, Converter]] = {"Resize": {10: resize}, "Upsample": {7: upsample}}


def grid_sample(
    ctx: ImportContext,
    ins: list[str],
    outs: list[str],
    align_corners: int = 0,
    mode: str = "linear",
    padding_mode: str = "zeros",
) -> None:
    # Opset 16 spelled the modes bilinear / bicubic.
    mode = {"bilinear": "linear", "bicubic": "cubic"}.get(mode, mode)
    x, grid = ctx.type(ins[0]), ctx.type(ins[1])
    ctx.inferred[outs[0]] = (x.shape[:2] + grid.shape[1:-1], x.dtype)
    ctx.emit(
        "GridSample",
        ins[:2],
        {"align_corners": align_corners, "mode": mode, "padding_mode": padding_mode},
        outs,
    )


CONVERTERS["GridSample"] = {16: grid_sample}
