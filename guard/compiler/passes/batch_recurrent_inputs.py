"""batch_recurrent_inputs: an RNN, GRU or LSTM's input gates as one GEMM over the sequence.

Every gate pre-activation of a recurrent layer is ``X_t W^T + Wb + h_{t-1} R^T + Rb``; only
the ``h R^T`` half depends on the previous step. The ``X W^T + Wb`` half of every step and
direction is one matrix product::

    G = reshape(X, [S*B, I]) @ Wcat + bcat      Wcat = [W_0^T | W_1^T]  ([I, D*g*H])
                                                bcat = [Wb_0 | Wb_1]     ([D*g*H])

which the GEMM machinery runs at its full rate (tiled, on the thread pool), instead of
``S`` matrix-vector products inside the serial recurrence. The recurrent node then reads
``reshape(G, [S, B, D*g*H])`` in place of X, with ``input_gates=1``, W omitted and Wb
zeroed in its B (Rb stays: for GRU with ``linear_before_reset`` it is scaled by the reset
gate, so it cannot move). The sums are reassociated (``(xW + Wb) + (hR + Rb)``), which
changes float32 rounding, not the result beyond it.

With W an input rather than a constant, ``Wcat`` is W reshaped to ``[D*g*H, I]`` (its
directions' rows one after the other) and the GEMM reads it transposed; with W or B not
constant the GEMM has no bias and the node keeps its whole B (the recurrence adds Wb).

Declines (in the notes): ``layout=1`` (guard.compiler.passes.recurrent_sequence_first runs
before it), not float32, or a node already rewritten. A 1-step sequence is
rewritten too (the GEMM is then a matrix-vector product, which costs the same as before and
keeps one form for the emitters).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from guard.compiler.ir.core import Graph, Node
from guard.compiler.passes.base import Pass, PassResult

GATES = {"RNN": 1, "GRU": 3, "LSTM": 4}


@dataclass
class BatchRecurrentInputs(Pass):
    name = "batch_recurrent_inputs"

    def run(self, graph: Graph) -> PassResult:
        stats = {"num_batched": 0, "num_declined": 0}
        notes: list[str] = []
        nodes: list[Node] = []
        for node in graph.nodes:
            why = self._why_not(graph, node) if node.op in GATES else "not recurrent"
            if why is None:
                nodes.extend(self._rewrite(graph, node))
                stats["num_batched"] += 1
            else:
                nodes.append(node)
                if node.op in GATES:
                    stats["num_declined"] += 1
                    notes.append(f"kept {node.label()}: {why}")
        graph.nodes = nodes
        if stats["num_batched"]:
            graph.prune_values()
        return PassResult(stats["num_batched"] > 0, stats, notes)

    @staticmethod
    def _why_not(graph: Graph, node: Node) -> str | None:
        if node.attrs.get("input_gates", 0):
            return "its input gates are already one GEMM"
        if node.attrs.get("layout", 0):
            return "layout=1 (recurrent_sequence_first makes it sequence first)"
        if graph.values[node.inputs[0]].dtype != np.float32:
            return "not float32"
        return None

    @staticmethod
    def _rewrite(graph: Graph, node: Node) -> list[Node]:
        before: list[Node] = []

        def add(op: str, ins: list[str], shape: tuple[int, ...], attrs: dict) -> str:
            n = graph.add_node(op, ins, [(shape, np.float32)], attrs)
            graph.nodes.pop()
            before.append(n)
            return n.outputs[0]

        ins = list(node.inputs)
        seq, batch, n_in = graph.values[ins[0]].shape
        w = graph.const(ins[1])
        dirs, gh = graph.values[ins[1]].shape[:2]  # gh = gates * hidden
        b = graph.const(ins[3]) if len(ins) > 3 and ins[3] else None
        flat = add("Reshape", [ins[0]], (seq * batch, n_in), {"shape": [seq * batch, n_in]})
        gemm = {"alpha": 1.0, "beta": 1.0, "transA": 0, "transB": 0}
        if w is not None:
            wcat = np.ascontiguousarray(np.concatenate([w[d].T for d in range(dirs)], axis=1))
            gin = [flat, graph.add_constant(None, wcat, "w_inputs").name]
        else:  # [D, g*H, I] -> [D*g*H, I], read transposed
            gin = [flat, add("Reshape", [ins[1]], (dirs * gh, n_in), {"shape": [dirs * gh, n_in]})]
            gemm["transB"] = 1
        if w is not None and (b is not None or len(ins) < 4 or not ins[3]):
            b = np.zeros((dirs, 2 * gh), np.float32) if b is None else b
            bcat = np.ascontiguousarray(np.concatenate([b[d, :gh] for d in range(dirs)]))
            gin.append(graph.add_constant(None, bcat, "b_inputs").name)
            b_rest = b.copy()
            b_rest[:, :gh] = 0  # Wb is in the GEMM's bias now; Rb stays with the recurrence
            ins += [""] * max(0, 4 - len(ins))
            ins[3] = graph.add_constant(None, b_rest, "b_recurrent").name
        # else the node keeps its B whole and the recurrence adds Wb
        gates = add("Gemm", gin, (seq * batch, dirs * gh), gemm)
        g3 = (seq, batch, dirs * gh)
        ins[0] = add("Reshape", [gates], g3, {"shape": list(g3)})
        ins[1] = ""
        attrs = {**node.attrs, "input_gates": 1}
        return [*before, Node(node.op, ins, list(node.outputs), attrs, node.name)]
