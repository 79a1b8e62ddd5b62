"""Build-time packing of the int8 kernels' constants, and the facts the kernels specialise on.

Notation (per output channel ``c``; the reduction padded to ``Kp``, a multiple of four):

- activations ``a`` (uint8 or int8) go through the packer into the dot class's u domain,
  ``u = a + sha - delta`` (``sha`` 128 for int8 activations, ``delta`` the class's, see
  quant/dot.py); their zero point becomes ``alpha = za + sha - delta`` (padding, of the
  image border and of the reduction, is ``alpha``: it contributes nothing);
- weights ``w`` (int8, or uint8 stored as ``w - 128``) are the signed ``s``, their zero
  point becomes ``beta[c] = zw[c] - shw``.

Then ``sum (a - za)(w - zw) = sum (u - alpha)(s - beta)
= sum u*s - alpha * S[c] - beta[c] * U[p] + Kp * alpha * beta[c]`` with ``S[c]`` the
column (channel) sum of ``s`` and ``U[p]`` the sum of ``u`` at output position ``p`` (only
needed when some ``beta`` is not zero, the u8 x s8 compensation of oneDNN). The kernel's
per-channel words: ``k0 = bias - alpha * S + Kp * alpha * beta`` when ``alpha`` is a
constant, else ``k0 = bias`` and ``k1 = Kp * beta - S`` times the run-time ``alpha``.

The packed block of the weights input: ``[weights words][k0][k1][beta][mult]``, each
per-channel array ``C`` int32 words long (``mult`` float32 bits), ``C`` the channel count
padded to the kernel's panel (:func:`channel_words`).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np

from guard.compiler.codegen.quant.dot import DotClass, pack_s_words
from guard.compiler.reference.quant import multiplier, out_range


def _i32(v: np.ndarray) -> np.ndarray:
    """Wrap to int32, as int32 accumulation does."""
    return np.asarray(v, np.int64).astype(np.int32)


def activation_shift(dtype: str) -> int:
    return 128 if dtype == "int8" else 0


def weights_signed(w: np.ndarray) -> tuple[np.ndarray, int]:
    """(s, shw): the weights as int8 and what was subtracted (128 for uint8)."""
    if w.dtype == np.uint8:
        return (w.astype(np.int16) - 128).astype(np.int8), 128
    return w.astype(np.int8), 0


def per_channel(v: np.ndarray | None, n: int, dtype: Any = np.int64) -> np.ndarray:
    if v is None:
        return np.zeros(n, dtype)
    v = np.asarray(v).reshape(-1).astype(dtype)
    return np.broadcast_to(v, (n,)).copy() if v.size == 1 else v


def channel_words(
    s_sum: np.ndarray, beta: np.ndarray, bias: np.ndarray, alpha: int | None, kp: int,
    mult: np.ndarray, padded: int,
) -> np.ndarray:  # fmt: skip
    """``[k0][k1][beta][mult]`` as int32 words, each ``padded`` long (zeros past the end)."""
    n = s_sum.size
    if alpha is None:
        k0 = bias.astype(np.int64)
        k1 = kp * beta - s_sum
    else:
        k0 = bias - alpha * s_sum + kp * alpha * beta
        k1 = np.zeros(n, np.int64)
    out = np.zeros((4, padded), np.int32)
    out[0, :n] = _i32(k0)
    out[1, :n] = _i32(k1)
    out[2, :n] = _i32(beta)
    out[3, :n] = np.asarray(mult, np.float32).view(np.int32)
    return out.reshape(-1)


def facts(
    dot: DotClass, alpha: int | None, beta: np.ndarray, out_dtype: str, attrs: Mapping[str, Any],
    zy: int,
) -> dict[str, Any]:  # fmt: skip
    """The attributes the kernel specialises on (they join the kernel key)."""
    if out_dtype == "int32":
        lo = hi = 0
    else:
        lo, hi = out_range(dict(attrs), np.dtype(out_dtype))
    return {
        "q_dot": dot.name,
        "q_alpha": alpha,
        "q_beta": bool(np.any(beta != 0)),
        "q_zy": int(zy),
        "q_lo": int(lo) - int(zy),
        "q_hi": int(hi) - int(zy),
    }


def requant_multiplier(
    sx: np.ndarray | None, sw: np.ndarray | None, sy: np.ndarray | None, n: int
) -> np.ndarray:
    if sx is None or sw is None or sy is None:
        return np.zeros(n, np.float32)
    return per_channel(multiplier(sx, sw, sy), n, np.float32)


def conv_weights(
    w: np.ndarray, dot: DotClass, mr: int, kg: int
) -> tuple[np.ndarray, np.ndarray, int, int]:
    """OIHW weights as ``[K][R][S][Cp]`` groups of four input channels (of four taps when
    there is one input channel per group), in the class's words, each row tile of ``mr``
    output channels of a group of ``kg`` (:func:`tile_rows`) ``[KG][rows][s_words]``
    (int32); also the channel sums ``S`` (int64), ``shw`` and ``Kp``."""
    s, shw = weights_signed(w)
    k, cg, r, sk = s.shape
    if cg == 1:  # depthwise: groups of four taps (quant/geometry.py, QConvGeometry.taps_grouped)
        kp = -(-r * sk // 4) * 4
        t1 = np.zeros((k, kp), np.int8)
        t1[:, : r * sk] = s.reshape(k, r * sk)
        words = pack_s_words(t1.reshape(k, kp // 4, 4), dot)
        return tile_rows(words, mr, kg), t1.astype(np.int64).sum(1), shw, kp
    cp = -(-cg // 4) * 4
    t = np.zeros((k, r, sk, cp), np.int8)
    t[..., :cg] = s.transpose(0, 2, 3, 1)
    kp = r * sk * cp
    words = pack_s_words(t.reshape(k, kp // 4, 4), dot)
    return tile_rows(words, mr, kg), t.reshape(k, -1).astype(np.int64).sum(1), shw, kp


def tile_rows(words: np.ndarray, mr: int, kg: int) -> np.ndarray:
    """``[K][KG][s_words]`` words with each row tile (``mr`` channels, the last of a group
    of ``kg`` shorter) group-major, ``[KG][rows][s_words]``, in the tile's own span: the
    micro-kernel reads a group's rows at constant offsets (quant/ukr.py)."""
    out = np.empty_like(words)
    for g0 in range(0, words.shape[0], kg):
        for m0 in range(g0, g0 + kg, mr):
            m1 = min(m0 + mr, g0 + kg)
            out[m0:m1] = words[m0:m1].transpose(1, 0, 2).reshape(m1 - m0, *words.shape[1:])
    return out.reshape(-1)


def matmul_weights(
    b: np.ndarray, dot: DotClass, nr: int
) -> tuple[np.ndarray, np.ndarray, int, int, int]:
    """B ``[K, N]`` as panels ``[N/nr][KG][s_words][nr]`` of the class's words (int32, zero
    padded past K and N); also the column sums ``S``, ``shw``, ``Kp`` and the padded N."""
    s, shw = weights_signed(b)
    kr, n = s.shape
    kp = -(-kr // 4) * 4
    npad = -(-n // nr) * nr
    t = np.zeros((npad, kp), np.int8)
    t[:n, :kr] = s.T
    words = pack_s_words(t.reshape(npad, kp // 4, 4), dot)  # [Npad][KG][sw]
    words = words.reshape(npad // nr, nr, kp // 4, dot.s_words).transpose(0, 2, 3, 1)
    return np.ascontiguousarray(words).reshape(-1), t[:n].astype(np.int64).sum(1), shw, kp, npad
