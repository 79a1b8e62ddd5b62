"""Reference kernels for linear algebra and transforms: Einsum, Det and the DFT."""

from __future__ import annotations

import numpy as np

from guard.compiler.reference.base import Attrs, Xs, arg


def einsum(xs: Xs, a: Attrs) -> list[np.ndarray]:
    args = [x for x in xs if x is not None]
    dt = args[0].dtype
    if dt.kind == "V":  # ml_dtypes (bf16): einsum in float32, rounded once
        args = [x.astype(np.float32) for x in args]
    return [np.asarray(np.einsum(a["equation"], *args)).astype(dt, copy=False)]


def det(xs: Xs, a: Attrs) -> list[np.ndarray]:
    x = arg(xs)
    return [np.linalg.det(x).astype(x.dtype)]


def dft(xs: Xs, a: Attrs) -> list[np.ndarray]:
    """DFT over ``axis`` of a real ([..., 1]) or complex ([..., 2]) signal; output [..., 2]
    (inverse one-sided: the real signal, [..., 1]). float32 input transforms in complex64,
    as the spec's reference results were computed."""
    x = arg(xs)
    cdt = np.complex64 if x.dtype == np.float32 else np.complex128
    c = x[..., 0].astype(cdt)
    if x.shape[-1] == 2:
        c = c + np.asarray(1j, cdt) * x[..., 1].astype(cdt)
    ax = a["axis"]
    if a["inverse"] and a["onesided"]:
        signal = np.fft.irfft(c, n=a["out_length"], axis=ax)
        return [signal[..., None].astype(x.dtype)]
    n = a.get("length") or c.shape[ax]
    y = np.fft.ifft(c, n=n, axis=ax) if a["inverse"] else np.fft.fft(c, n=n, axis=ax)
    if a["onesided"]:
        y = np.take(y, np.arange(n // 2 + 1), axis=ax)
    return [np.stack([y.real, y.imag], axis=-1).astype(x.dtype)]


KERNELS = {"Einsum": einsum, "Det": det, "DFT": dft}
