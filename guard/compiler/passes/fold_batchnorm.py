"""fold_batchnorm: fold inference BatchNormalization into the Conv or Gemm that feeds it.

With ``inv = gamma / sqrt(var + eps)`` per output channel c:

    W'[c] = W[c] * inv[c]            b'[c] = (b[c] - mean[c]) * inv[c] + beta[c]

(for Gemm the channel is the output column: W'[:, c] = W[:, c] * inv[c], or rows of W when
transB=1). The arithmetic is done in float64 and rounded once to the weight dtype.

Declines (and says so in the notes) when the producer has another reader, when weights or
BN parameters are not constants, and when the folded weights or bias would overflow the
weight dtype (float16: |w| > 65504 becomes inf; a tiny running variance does this).
A BatchNormalization that is left over (no foldable producer) is rewritten to
``x * scale + shift`` with constant per-channel scale and shift, which fuse_elementwise can
then merge with its neighbours; ``to_affine=False`` keeps it.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from guard.compiler.ir.core import Graph, Node
from guard.compiler.passes.base import Pass, PassResult


@dataclass
class FoldBatchnorm(Pass):
    name = "fold_batchnorm"
    to_affine: bool = True

    def run(self, graph: Graph) -> PassResult:
        producers = graph.producers()
        uses = graph.use_counts()
        stats = {"num_folded_conv": 0, "num_folded_gemm": 0, "num_to_affine": 0, "num_declined": 0}
        notes: list[str] = []
        dead: set[int] = set()
        for bn in list(graph.nodes):
            if bn.op != "BatchNormalization":
                continue
            params = [graph.const(i) for i in bn.inputs[1:5]]
            if any(p is None for p in params):
                stats["num_declined"] += 1
                notes.append(f"kept {bn.label()}: its scale/bias/mean/var are not constants")
                continue
            gamma, beta, mean, var = (p.astype(np.float64) for p in params)  # type: ignore[union-attr]
            inv = gamma / np.sqrt(var + bn.attrs["epsilon"])
            p = producers.get(bn.inputs[0])
            reason = self._why_not(graph, p, uses)
            if reason is None:
                assert p is not None
                reason = self._fold(graph, p, bn, inv, beta, mean)
                if reason is None:
                    stats["num_folded_conv" if p.op == "Conv" else "num_folded_gemm"] += 1
                    dead.add(id(bn))
                    continue
            notes.append(f"did not fold {bn.label()} into its producer: {reason}")
            if self.to_affine:
                self._affine(graph, bn, inv, beta, mean)
                stats["num_to_affine"] += 1
            else:
                stats["num_declined"] += 1
        graph.nodes = [n for n in graph.nodes if id(n) not in dead]
        changed = any(v for k, v in stats.items() if k != "num_declined")
        if changed:
            graph.prune_values()
        return PassResult(changed, stats, notes)

    def _why_not(self, graph: Graph, p: Node | None, uses: dict[str, int]) -> str | None:
        if p is None or p.op not in ("Conv", "Gemm"):
            return f"its input is not produced by a Conv or Gemm ({p.op if p else 'none'})"
        if uses.get(p.outputs[0], 0) != 1:
            return f"{p.label()} has other readers"
        if graph.const(p.inputs[1]) is None:
            return f"{p.label()}'s weights are not constant"
        if len(p.inputs) > 2 and graph.const(p.inputs[2]) is None:
            return f"{p.label()}'s bias is not constant"
        if p.op == "Gemm" and p.attrs.get("beta", 1.0) != 1.0 and len(p.inputs) > 2:
            return f"{p.label()} scales its bias (beta != 1)"
        return None

    def _fold(
        self, graph: Graph, p: Node, bn: Node, inv: np.ndarray, beta: np.ndarray, mean: np.ndarray
    ) -> str | None:
        w = graph.const(p.inputs[1])
        assert w is not None
        out_ch = w.shape[0] if p.op == "Conv" else graph.values[p.outputs[0]].shape[1]
        b = graph.const(p.inputs[2]) if len(p.inputs) > 2 else None
        if b is None:
            b64 = np.zeros(out_ch)
        elif b.size in (1, out_ch):
            b64 = np.broadcast_to(b.astype(np.float64).reshape(-1), (out_ch,))
        else:
            return f"{p.label()}'s bias is not per output channel"
        if p.op == "Conv":
            w2 = w.astype(np.float64) * inv.reshape((-1,) + (1,) * (w.ndim - 1))
        elif p.attrs.get("transB", 0):
            w2 = w.astype(np.float64) * inv.reshape(-1, 1)
        else:
            w2 = w.astype(np.float64) * inv.reshape(1, -1)
        b2 = (b64 - mean) * inv + beta  # alpha scales A@B only, so it commutes with inv
        if w.dtype.kind == "f":
            big = float(np.finfo(w.dtype).max)
            if np.abs(w2).max(initial=0) > big or np.abs(b2).max(initial=0) > big:
                return (
                    f"the folded weights would overflow {w.dtype} (max |w'| = "
                    f"{np.abs(w2).max():.3g} > {big:.6g})"
                )
        w_name = graph.add_constant(None, w2.astype(w.dtype), "bnfold_w").name
        b_name = graph.add_constant(None, b2.astype(w.dtype), "bnfold_b").name
        p.inputs = [p.inputs[0], w_name, b_name]
        # The producer now writes the BN's output directly.
        old = p.outputs[0]
        p.outputs = [bn.outputs[0]]
        graph.values.pop(old, None)
        return None

    def _affine(
        self, graph: Graph, bn: Node, inv: np.ndarray, beta: np.ndarray, mean: np.ndarray
    ) -> None:
        x = graph.values[bn.inputs[0]]
        shape = (-1,) + (1,) * (len(x.shape) - 2)
        scale = graph.add_constant(None, inv.reshape(shape).astype(x.dtype), "bn_scale").name
        shift = graph.add_constant(
            None, (beta - mean * inv).reshape(shape).astype(x.dtype), "bn_shift"
        ).name
        idx = graph.nodes.index(bn)
        (t,) = graph.add_node(
            "Mul", [bn.inputs[0], scale], [(x.shape, x.dtype)], index=idx, name=f"{bn.name}/scale"
        ).outputs
        bn.op, bn.inputs, bn.attrs = "Add", [t, shift], {}
