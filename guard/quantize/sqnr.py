"""Per-tensor error of a QDQ model against its fp32 source: which tensor lost the accuracy.

As onnxruntime's qdq_loss_debug does (``create_activation_matching``, ``compute_signal_to
_quantization_noice_ratio``): both models run on the same inputs, and each quantised
activation T of the fp32 model is matched with the QDQ model's dequantised
``T_DequantizeLinear_Output``, which carries every error made up to and including T's own
rounding. SQNR = 10 log10(sum x^2 / sum (x - y)^2) over all samples together (a sum, not a
mean of per-sample ratios, so one quiet sample does not dominate). The graph outputs are
matched with themselves.

Both models run on the bundled compiler's reference interpreter, unoptimised: the numbers
describe the model, not one backend (a backend's own outputs are compared in guard.run).
An exact match has no noise: its SQNR is reported as ``MAX_SQNR_DB``.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import onnx

from guard.compiler import import_onnx, run_reference
from guard.quantize.calibration import Feeds
from guard.quantize.qdq import DQ_SUFFIX, Q_SUFFIX

MAX_SQNR_DB = 200.0


@dataclass(frozen=True)
class TensorError:
    tensor: str
    node: str  # the fp32 model's node that computes it ("input" for a graph input)
    sqnr_db: float
    output: bool = False  # a graph output (the end-to-end error)

    def to_json(self) -> dict[str, object]:
        return {"tensor": self.tensor, "node": self.node, "sqnr_db": round(self.sqnr_db, 2)}


def sqnr_db(signal: float, noise: float) -> float:
    if noise <= 0.0:
        return MAX_SQNR_DB
    if signal <= 0.0:
        return -MAX_SQNR_DB
    return max(-MAX_SQNR_DB, min(MAX_SQNR_DB, 10.0 * math.log10(signal / noise)))


def matched_tensors(qdq: onnx.ModelProto) -> list[tuple[str, str]]:
    """(fp32 tensor, its QDQ-model counterpart): every quantised activation, then outputs."""
    q_of = {n.output[0]: n.input[0] for n in qdq.graph.node if n.op_type == "QuantizeLinear"}
    pairs = []
    for n in qdq.graph.node:
        if n.op_type == "DequantizeLinear" and n.input[0] in q_of:
            src = q_of[n.input[0]]
            if n.input[0] == src + Q_SUFFIX and n.output[0] == src + DQ_SUFFIX:
                pairs.append((src, n.output[0]))
    pairs += [(o.name, o.name) for o in qdq.graph.output]
    return pairs


def tensor_errors(
    fp32: onnx.ModelProto, qdq: onnx.ModelProto, samples: Sequence[Feeds]
) -> list[TensorError]:
    """Every matched tensor's SQNR over ``samples``, worst first (graph outputs included)."""
    shapes = {k: tuple(v.shape) for k, v in samples[0].items()}
    g_f = import_onnx(fp32, shapes)
    g_q = import_onnx(qdq, shapes)
    outputs = {o.name for o in qdq.graph.output}
    pairs = [(a, b) for a, b in matched_tensors(qdq) if a in g_f.values and b in g_q.values]
    g_f.outputs = list(dict.fromkeys([*g_f.outputs, *(a for a, _ in pairs)]))
    g_q.outputs = list(dict.fromkeys([*g_q.outputs, *(b for _, b in pairs)]))
    node_of = {o: (n.name or n.op_type) for n in fp32.graph.node for o in n.output}
    signal = dict.fromkeys(pairs, 0.0)
    noise = dict.fromkeys(pairs, 0.0)
    for feeds in samples:
        of, oq = run_reference(g_f, feeds), run_reference(g_q, feeds)
        for a, b in pairs:
            x = np.asarray(of[a], np.float64)
            y = np.asarray(oq[b], np.float64)
            signal[(a, b)] += float(np.sum(x * x))
            noise[(a, b)] += float(np.sum((x - y) ** 2))
    out = [
        TensorError(
            a, node_of.get(a, "input"), sqnr_db(signal[(a, b)], noise[(a, b)]), a in outputs
        )
        for a, b in pairs
    ]
    return sorted(out, key=lambda e: (e.sqnr_db, e.tensor))


def outputs_sqnr(
    fp32_outputs: Sequence[Sequence[np.ndarray]], int8_outputs: Sequence[Sequence[np.ndarray]]
) -> float:
    """The worst output's SQNR between two runs' outputs (lists of samples of outputs)."""
    worst = MAX_SQNR_DB
    for k in range(len(fp32_outputs[0]) if fp32_outputs else 0):
        s = n = 0.0
        for f, q in zip(fp32_outputs, int8_outputs, strict=True):
            x = np.asarray(f[k], np.float64)
            y = np.asarray(q[k], np.float64)
            s += float(np.sum(x * x))
            n += float(np.sum((x - y) ** 2))
        worst = min(worst, sqnr_db(s, n))
    return worst


def top1_agreement(
    fp32_outputs: Sequence[Sequence[np.ndarray]], int8_outputs: Sequence[Sequence[np.ndarray]]
) -> float | None:
    """The fraction of rows whose argmax over the last axis agrees, on the first output
    (None when that output is not a score vector: rank 0, or one class). Trailing size-1
    axes are dropped first ([N, 1000, 1, 1] logits are [N, 1000])."""
    agree = total = 0
    for f, q in zip(fp32_outputs, int8_outputs, strict=True):
        x, y = _scores(np.asarray(f[0])), _scores(np.asarray(q[0]))
        if x.ndim == 0 or x.shape[-1] < 2:
            return None
        a, b = x.reshape(-1, x.shape[-1]).argmax(-1), y.reshape(-1, y.shape[-1]).argmax(-1)
        agree += int((a == b).sum())
        total += a.size
    return agree / total if total else None


def _scores(x: np.ndarray) -> np.ndarray:
    while x.ndim > 1 and x.shape[-1] == 1:
        x = x.reshape(x.shape[:-1])
    return x
