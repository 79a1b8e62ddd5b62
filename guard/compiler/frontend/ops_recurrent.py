"""Converters for RNN, GRU and LSTM: activations defaulted per op, every output typed
(Y, Y_h and, for LSTM, Y_c), omitted optional outputs given internal names."""

from __future__ import annotations

from guard.compiler.frontend.context import Converter, ImportContext

DEFAULT_ACTS = {"RNN": ["Tanh"], "GRU": ["Sigmoid", "Tanh"], "LSTM": ["Sigmoid", "Tanh", "Tanh"]}


def _recurrent(kind: str) -> Converter:
    def conv(
        ctx: ImportContext,
        ins: list[str],
        outs: list[str],
        activation_alpha: list[float] | None = None,
        activation_beta: list[float] | None = None,
        activations: list[str] | None = None,
        clip: float | None = None,
        direction: str = "forward",
        hidden_size: int | None = None,
        input_forget: int = 0,
        layout: int = 0,
        linear_before_reset: int = 0,
    ) -> None:
        x, w, r = ctx.type(ins[0]), ctx.type(ins[1]), ctx.type(ins[2])
        if len(x.shape) != 3 or len(w.shape) != 3 or x.shape[2] != w.shape[2]:
            # onnxruntime refuses the same at run time ("Input X must have 3 dimensions").
            raise ctx.error(
                f"{kind} input X is {x.type_str()} and W {w.type_str()}: X must be 3-D "
                "(sequence, batch, input size; batch first with layout=1) and its input size "
                "W's last dim",
                hint="Check the input shapes bound for this model.",
            )
        dirs = 2 if direction == "bidirectional" else 1
        hs = int(hidden_size or r.shape[-1])
        acts = list(activations or DEFAULT_ACTS[kind] * dirs)
        if len(acts) == len(DEFAULT_ACTS[kind]) and dirs == 2:
            acts = acts * 2
        seq, batch = (x.shape[0], x.shape[1]) if not layout else (x.shape[1], x.shape[0])
        y_shape = (seq, dirs, batch, hs) if not layout else (batch, seq, dirs, hs)
        h_shape = (dirs, batch, hs) if not layout else (batch, dirs, hs)
        n_out = 3 if kind == "LSTM" else 2
        names = [
            o if o else ctx.fresh(f"{kind.lower()}_unused")
            for o in list(outs) + [""] * (n_out - len(outs))
        ]
        for name, shape in zip(names, [y_shape, h_shape, h_shape], strict=False):
            ctx.inferred[name] = (shape, x.dtype)
        attrs = {
            "hidden_size": hs,
            "direction": direction,
            "activations": acts,
            "activation_alpha": activation_alpha,
            "activation_beta": activation_beta,
            "clip": clip,
            "layout": layout,
            "n_outputs": n_out,
        }
        if kind == "GRU":
            attrs["linear_before_reset"] = linear_before_reset
        if kind == "LSTM":
            attrs["input_forget"] = input_forget
        ctx.emit(kind, list(ins), attrs, names)

    return conv


CONVERTERS: dict[str, dict[int, Converter]] = {
    "RNN": {1: _recurrent("RNN")}, "GRU": {1: _recurrent("GRU")}, "LSTM": {1: _recurrent("LSTM")},
}  # fmt: skip
