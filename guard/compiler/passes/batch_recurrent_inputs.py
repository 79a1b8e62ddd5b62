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

Declines (in the notes): W or B not constant, ``layout=1`` (batch first), or a node already
rewritten. A 1-step sequence is rewritten too (the GEMM is then a matrix-vector product,
which costs the same as before and keeps one form for the emitters).
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
            return "layout=1 (batch first)"
        if graph.const(node.inputs[1]) is None:
            return "W is not constant"
        if len(node.inputs) > 3 and node.inputs[3] and graph.const(node.inputs[3]) is None:
            return "B is not constant"
        if graph.values[node.inputs[0]].dtype != np.float32:
            return "not float32"
        return None

    @staticmethod
    def _rewrite(graph: Graph, node: Node) -> list[Node]:
        x = graph.values[node.inputs[0]]
        w = graph.const(node.inputs[1])
        assert w is not None
        dirs, gh, n_in = w.shape  # gh = gates * hidden
        seq, batch = x.shape[0], x.shape[1]
        has_b = len(node.inputs) > 3 and bool(node.inputs[3])
        b = graph.const(node.inputs[3]) if has_b else None
        b = np.zeros((dirs, 2 * gh), w.dtype) if b is None else b
        wcat = np.ascontiguousarray(np.concatenate([w[d].T for d in range(dirs)], axis=1))
        bcat = np.ascontiguousarray(np.concatenate([b[d, :gh] for d in range(dirs)]))
        b_rest = b.copy()
        b_rest[:, :gh] = 0  # Wb is in the GEMM's bias now; Rb stays with the recurrence
        new: list[Node] = []

        def add(op: str, ins: list[str], shape: tuple[int, ...], attrs: dict) -> str:
            n = graph.add_node(op, ins, [(shape, x.dtype)], attrs)
            graph.nodes.pop()
            new.append(n)
            return n.outputs[0]

        flat = add("Reshape", [node.inputs[0]], (seq * batch, n_in), {"shape": [seq * batch, n_in]})
        wname = graph.add_constant(None, wcat, "w_inputs").name
        bname = graph.add_constant(None, bcat, "b_inputs").name
        gates = add("Gemm", [flat, wname, bname], (seq * batch, dirs * gh),
                    {"alpha": 1.0, "beta": 1.0, "transA": 0, "transB": 0})  # fmt: skip
        g3 = add("Reshape", [gates], (seq, batch, dirs * gh), {"shape": [seq, batch, dirs * gh]})
        ins = list(node.inputs)
        ins[0], ins[1] = g3, ""
        if len(ins) < 4:
            ins += [""] * (4 - len(ins))
        ins[3] = graph.add_constant(None, b_rest, "b_recurrent").name
        new.append(Node(node.op, ins, list(node.outputs), {**node.attrs, "input_gates": 1},
                        node.name))  # fmt: skip
        return new
