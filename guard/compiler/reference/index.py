"""Reference kernels for index-driven ops: triangular masks, one-hot, gather/scatter
by index tuples or elements, top-k and sequence reversal."""

from __future__ import annotations

import numpy as np

from guard.compiler.ir.core import is_float
from guard.compiler.reference.base import Attrs, Xs, arg


def trilu(xs: Xs, a: Attrs) -> list[np.ndarray]:
    x = arg(xs)
    return [np.triu(x, a["k"]) if a["upper"] else np.tril(x, a["k"])]


def one_hot(xs: Xs, a: Attrs) -> list[np.ndarray]:
    idx, depth, values = arg(xs), int(a["depth"]), arg(xs, 2)
    idx = np.where(idx < 0, idx + depth, idx).astype(np.int64)
    axis = a["axis"]
    eye = np.arange(depth) == idx[..., None]
    out = np.where(eye, values[1], values[0]).astype(values.dtype)
    return [np.moveaxis(out, -1, axis)]


def gather_nd(xs: Xs, a: Attrs) -> list[np.ndarray]:
    data, idx = arg(xs), arg(xs, 1).astype(np.int64)
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
    data, idx, upd = arg(xs).copy(), arg(xs, 1).astype(np.int64), arg(xs, 2)
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
    data, idx, upd = arg(xs).copy(), arg(xs, 1).astype(np.int64), arg(xs, 2)
    fn = _REDUCE[a.get("reduction", "none")]
    flat_idx = idx.reshape(-1, idx.shape[-1])
    flat_upd = upd.reshape((flat_idx.shape[0],) + upd.shape[idx.ndim - 1 :])
    for k, i in enumerate(flat_idx):
        t = tuple(i)
        data[t] = flat_upd[k] if fn is None else fn(data[t], flat_upd[k])
    return [data]


def top_k(xs: Xs, a: Attrs) -> list[np.ndarray]:
    x = arg(xs)
    k, ax = a["k"], a["axis"]
    # Stable: among equal values the lower index comes first, as the spec requires.
    # ~x reverses integer order exactly (-x would overflow at the dtype's minimum).
    key = (np.negative(x) if is_float(x.dtype) else np.invert(x)) if a.get("largest", 1) else x
    order = np.argsort(key, axis=ax, kind="stable")
    idx = np.take(order, np.arange(k), axis=ax)
    return [np.take_along_axis(x, idx, axis=ax), idx.astype(np.int64)]


def reverse_sequence(xs: Xs, a: Attrs) -> list[np.ndarray]:
    x, lens = arg(xs), arg(xs, 1).astype(np.int64)
    t_ax, b_ax = a["time_axis"], a["batch_axis"]
    y = x.copy()
    for b, n in enumerate(lens):
        src: list[int | slice] = [slice(None)] * x.ndim
        src[b_ax], src[t_ax] = b, slice(0, n)
        dst = list(src)
        dst[t_ax] = slice(n - 1, None, -1) if n > 0 else slice(0, 0)
        y[tuple(dst)] = x[tuple(src)]
    return [y]


KERNELS = {
    "Trilu": trilu, "OneHot": one_hot, "GatherND": gather_nd,
    "ScatterElements": scatter_elements, "ScatterND": scatter_nd, "TopK": top_k,
    "ReverseSequence": reverse_sequence,
}  # fmt: skip
