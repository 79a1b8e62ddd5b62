"""Reference kernels for RNN, GRU and LSTM (ONNX semantics, both layouts and directions).

Gate order in W/R/B: GRU ``z, r, h``; LSTM ``i, o, f, c`` with peepholes ``i, o, f``.
``sequence_lens`` stops each batch row early: its outputs past the end are zero and its
final state is the one at its last valid step (the reverse direction starts there). As in
onnxruntime, a row of length 0 has a zero final state (Y_h, Y_c), not its initial one;
lengths are clamped to ``[0, seq]`` (onnxruntime refuses a longer one at run time).

With ``input_gates=1`` (guard.compiler.passes.batch_recurrent_inputs) input 0 is not X but
its gate pre-activations for every step, ``X W^T + Wb`` as ``[seq, batch, dirs * gates *
hidden]`` (layout 0), and W is omitted: only the recurrence is left to the op.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from guard.compiler.reference.base import Attrs, Xs


def _act(name: str, alpha: float | None, beta: float | None) -> Callable[[np.ndarray], np.ndarray]:
    n = name.lower()
    if n == "sigmoid":
        return lambda x: 1 / (1 + np.exp(-x))
    if n == "tanh":
        return np.tanh
    if n == "relu":
        return lambda x: np.maximum(x, 0)
    if n == "affine":
        return lambda x: (alpha if alpha is not None else 1.0) * x + (beta or 0.0)
    if n == "leakyrelu":
        a = 0.01 if alpha is None else alpha
        return lambda x: np.where(x >= 0, x, a * x)
    if n == "thresholdedrelu":
        a = 1.0 if alpha is None else alpha
        return lambda x: np.where(x > a, x, 0)
    if n == "scaledtanh":
        return lambda x: (alpha or 1.0) * np.tanh((beta or 1.0) * x)
    if n == "hardsigmoid":
        a, b = (0.2 if alpha is None else alpha), (0.5 if beta is None else beta)
        return lambda x: np.clip(a * x + b, 0, 1)
    if n == "elu":
        a = 1.0 if alpha is None else alpha
        return lambda x: np.where(x > 0, x, a * (np.exp(x) - 1))
    if n == "softsign":
        return lambda x: x / (1 + np.abs(x))
    if n == "softplus":
        return lambda x: np.log1p(np.exp(x))
    raise ValueError(f"unknown activation {name!r}")


def _acts(a: Attrs, n_per_dir: int, dirs: int) -> list[list[Callable[[np.ndarray], np.ndarray]]]:
    names = a["activations"]
    alphas, betas = a.get("activation_alpha") or [], a.get("activation_beta") or []
    out = []
    for d in range(dirs):
        fs = []
        for k in range(n_per_dir):
            i = d * n_per_dir + k
            fs.append(
                _act(
                    names[i],
                    alphas[i] if i < len(alphas) else None,
                    betas[i] if i < len(betas) else None,
                )
            )
        out.append(fs)
    return out


def _run(kind: str, xs: Xs, a: Attrs) -> list[np.ndarray]:
    x, w, r = xs[0], xs[1], xs[2]
    pre_gates = bool(a.get("input_gates", 0))  # x holds X W^T + Wb for every step
    assert x is not None and (w is not None or pre_gates) and r is not None
    b = xs[3] if len(xs) > 3 else None
    lens = xs[4] if len(xs) > 4 else None
    h0 = xs[5] if len(xs) > 5 else None
    c0 = xs[6] if len(xs) > 6 and kind == "LSTM" else None
    p = xs[7] if len(xs) > 7 and kind == "LSTM" else None
    layout = a.get("layout", 0)
    if layout:
        x = np.swapaxes(x, 0, 1)
        h0 = None if h0 is None else np.swapaxes(h0, 0, 1)
        c0 = None if c0 is None else np.swapaxes(c0, 0, 1)
    seq, batch, _ = x.shape
    hs = a["hidden_size"]
    dirs = 2 if a["direction"] == "bidirectional" else 1
    gates = {"RNN": 1, "GRU": 3, "LSTM": 4}[kind]
    acts = _acts(a, {"RNN": 1, "GRU": 2, "LSTM": 3}[kind], dirs)
    clip = a.get("clip")
    lens_v = np.full(batch, seq) if lens is None else np.clip(lens.astype(np.int64), 0, seq)
    y = np.zeros((seq, dirs, batch, hs), np.float64)
    y_h = np.zeros((dirs, batch, hs), np.float64)
    y_c = np.zeros((dirs, batch, hs), np.float64)
    xd = x.astype(np.float64)
    for d in range(dirs):
        reverse = a["direction"] == "reverse" or d == 1
        rd = r[d].astype(np.float64)
        wd = None if w is None else w[d].astype(np.float64)
        bd = b[d].astype(np.float64) if b is not None else np.zeros(2 * gates * hs)
        wb, rb = bd[: gates * hs], bd[gates * hs :]
        h = h0[d].astype(np.float64) if h0 is not None else np.zeros((batch, hs))
        c = c0[d].astype(np.float64) if c0 is not None else np.zeros((batch, hs))
        pd = p[d].astype(np.float64) if p is not None else np.zeros(3 * hs)
        # RNN has one activation (g is unused there); GRU and LSTM have two or three.
        f = acts[d][0]
        g = acts[d][1] if len(acts[d]) > 1 else f
        for step in range(seq):
            # Row-wise time index: reverse runs each row from its own last valid step.
            t = np.where(reverse, lens_v - 1 - step, step) if reverse else np.full(batch, step)
            valid = step < lens_v
            tt = np.clip(t, 0, seq - 1)
            xt = xd[tt, np.arange(batch)]
            if wd is None:  # input_gates: this direction's slice, Wb already added
                gx = xt[:, d * gates * hs : (d + 1) * gates * hs] + wb
            else:
                gx = xt @ wd.T + wb
            gh = h @ rd.T + rb
            if kind == "RNN":
                pre = gx + gh
                if clip is not None:
                    pre = np.clip(pre, -clip, clip)
                h_new, c_new = f(pre), c
            elif kind == "GRU":

                def cl(v: np.ndarray) -> np.ndarray:
                    return np.clip(v, -clip, clip) if clip is not None else v

                z = f(cl(gx[:, :hs] + gh[:, :hs]))
                rr = f(cl(gx[:, hs : 2 * hs] + gh[:, hs : 2 * hs]))
                if a.get("linear_before_reset", 0):
                    hh = g(cl(gx[:, 2 * hs :] + rr * gh[:, 2 * hs :]))
                else:
                    hh = g(cl(gx[:, 2 * hs :] + (rr * h) @ rd[2 * hs :].T + rb[2 * hs :]))
                h_new, c_new = (1 - z) * hh + z * h, c
            else:
                hfn = acts[d][2]
                pre = gx + gh

                def cl(v: np.ndarray) -> np.ndarray:
                    return np.clip(v, -clip, clip) if clip is not None else v

                i = f(cl(pre[:, :hs] + pd[:hs] * c))
                fg = f(cl(pre[:, 2 * hs : 3 * hs] + pd[2 * hs :] * c))
                if a.get("input_forget", 0):
                    fg = 1 - i
                cc = g(cl(pre[:, 3 * hs :]))
                c_new = fg * c + i * cc
                o = f(cl(pre[:, hs : 2 * hs] + pd[hs : 2 * hs] * c_new))
                h_new = o * hfn(c_new)
            vm = valid[:, None]
            h = np.where(vm, h_new, h)
            c = np.where(vm, c_new, c)
            rows = np.nonzero(valid)[0]
            y[tt[rows], d, rows] = h[rows]
        empty = (lens_v == 0)[:, None]  # onnxruntime: no step, a zero final state
        y_h[d], y_c[d] = np.where(empty, 0.0, h), np.where(empty, 0.0, c)
    dt = x.dtype
    if layout:
        return [
            np.transpose(y, (2, 0, 1, 3)).astype(dt),
            np.swapaxes(y_h, 0, 1).astype(dt),
            np.swapaxes(y_c, 0, 1).astype(dt),
        ]
    return [y.astype(dt), y_h.astype(dt), y_c.astype(dt)]


def _kernel(kind: str) -> Callable[[Xs, Attrs], list[np.ndarray]]:
    def k(xs: Xs, a: Attrs) -> list[np.ndarray]:
        outs = _run(kind, xs, a)
        return outs[: a["n_outputs"]]

    return k


KERNELS = {"RNN": _kernel("RNN"), "GRU": _kernel("GRU"), "LSTM": _kernel("LSTM")}
