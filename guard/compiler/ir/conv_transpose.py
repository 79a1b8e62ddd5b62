"""Facts about a ConvTranspose that the fold (passes/fold_integer_conv.py) and its kernel
(codegen/conv/transpose_blocks.py) must agree on."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import numpy as np

from guard.compiler.ir.core import AttrValue

EXACT = 1 << 24  # float32 holds every integer below this exactly


def blockwise(attrs: Mapping[str, AttrValue], x: Sequence[int], w: Sequence[int]) -> bool:
    """Whether a ConvTranspose of ``x`` by ``w`` writes disjoint whole kernel blocks: group
    1, stride equal to the kernel, no dilation, no begin pads, and any output padding
    cropped again by the end pads (so the output is exactly the blocks)."""
    k = len(x) - 2
    if k not in (1, 2) or len(w) != len(x) or int(attrs.get("group", 1)) != 1:
        return False
    st, dil, pads = list(attrs["strides"]), list(attrs["dilations"]), list(attrs["pads"])
    outp = list(attrs.get("output_padding") or [0] * k)
    return all(
        st[i] == w[2 + i] and (dil[i] == 1 or w[2 + i] == 1) and pads[i] == 0
        and outp[i] == pads[i + k]
        for i in range(k)
    )  # fmt: skip


def exact_bound(w: np.ndarray, zw: np.ndarray | int) -> int:
    """The largest magnitude a partial sum of an integer ConvTranspose column can reach
    when ``|x - zx| <= 255``: ``255 * max over (k, taps) of sum_c |w[c, k] - zw[k]|``."""
    c, k = w.shape[:2]
    d = w.astype(np.int64).reshape(c, k, -1) - np.asarray(zw, np.int64).reshape(1, -1, 1)
    return int(255 * np.abs(d).sum(axis=0).max()) if d.size else 0
