"""recompute_cheap: compute a cheap tensor twice instead of keeping it live across the peak.

The budget ladder's third rung (guard.compiler.fit.ladder). A tensor that is written
before the step of peak memory, is not touched at that step and is read again after it
occupies arena bytes at the peak for nothing. When its producer is cheap (an elementwise
op or a FusedElementwise chain: one read and one write per element, no reduction) and
every tensor the producer reads is live at the late reader anyway (or is a constant),
a second copy of the producer placed just before the late readers lets the first copy
die at its last early reader. The cost is one more pass over the tensor's elements.

:func:`candidates` finds such tensors for a schedule and memory plan; :class:`RecomputeCheap`
rewrites the ones it is given. Arithmetic is unchanged: the clone is the same op with the
same attributes on the same inputs (outputs equal bit for bit). The ladder keeps a
rewrite only when the re-planned arena is smaller.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from guard.compiler.graph.memory import MemoryPlan
from guard.compiler.graph.view import GraphView, align, liveness
from guard.compiler.ir import ops
from guard.compiler.ir.core import Graph, Node
from guard.compiler.passes.base import Pass, PassResult


def cheap(op: str) -> bool:
    """Elementwise: one read and one write per element (the recomputation costs a pass)."""
    return op == "FusedElementwise" or (op in ops.TRAITS and ops.TRAITS[op].elementwise)


def peak_step(view: GraphView, order: tuple[int, ...]) -> int:
    """The step of ``order`` with the most live bytes (aligned, unaliased)."""
    iv = liveness(view, order)
    delta = [0] * (len(order) + 1)
    for t, it in iv.items():
        delta[it.start] += align(view.tensors[t].nbytes)
        delta[it.end + 1] -= align(view.tensors[t].nbytes)
    best, cur, at = -1, 0, 0
    for s in range(len(order)):
        cur += delta[s]
        if cur > best:
            best, at = cur, s
    return at


def candidates(view: GraphView, memory: MemoryPlan) -> list[tuple[str, tuple[str, ...]]]:
    """(tensor, names of its readers after the peak) for each tensor worth recomputing,
    largest first (see the module docstring for the conditions)."""
    order = memory.order
    step = {node: s for s, node in enumerate(order)}
    iv = liveness(view, order)
    peak = peak_step(view, order)
    out: list[tuple[int, str, tuple[str, ...]]] = []
    for t, it in iv.items():
        p = view.producer.get(t)
        if p is None or t in view.outputs or not (it.start < peak < it.end):
            continue
        node = view.nodes[p]
        if not cheap(node.op) or node.has_subgraph or len(node.outputs) != 1:
            continue
        readers = view.consumers.get(t, ())
        if any(step[c] == peak for c in readers):
            continue
        late = [c for c in readers if step[c] > peak]
        if not late:
            continue
        first_late = min(step[c] for c in late)
        inputs_live = all(
            not view.is_arena(x) or (iv[x].start <= peak and iv[x].end >= first_late)
            for x in node.inputs
            if x
        )
        if inputs_live:
            names = tuple(view.nodes[c].name for c in sorted(late, key=step.__getitem__))
            out.append((view.tensors[t].nbytes, t, names))
    out.sort(key=lambda r: (-r[0], r[1]))
    return [(t, names) for _, t, names in out]


@dataclass
class RecomputeCheap(Pass):
    """For each (tensor, late readers): a clone of its producer feeds the late readers."""

    name = "recompute_cheap"
    splits: tuple[tuple[str, tuple[str, ...]], ...] = field(default_factory=tuple)

    def run(self, graph: Graph) -> PassResult:
        stats = {"num_recomputed": 0, "bytes_recomputed": 0}
        notes: list[str] = []
        producers = graph.producers()
        for t, late in self.splits:
            p = producers.get(t)
            if p is None or not cheap(p.op) or len(p.outputs) != 1:
                notes.append(f"{t!r}: not written by one elementwise node; not recomputed")
                continue
            readers = [i for i, n in enumerate(graph.nodes) if n.name in late and t in n.inputs]
            if not readers:
                notes.append(f"{t!r}: none of {list(late)} reads it; not recomputed")
                continue
            copy = graph.fresh(f"{t}/recomputed")
            v = graph.values[t]
            clone = Node(p.op, list(p.inputs), [copy], dict(p.attrs), f"{p.name}/recomputed")
            graph.values[copy] = type(v)(copy, v.shape, v.dtype)
            for i in readers:
                n = graph.nodes[i]
                n.inputs = [copy if x == t else x for x in n.inputs]
            graph.nodes.insert(readers[0], clone)
            producers[copy] = clone
            stats["num_recomputed"] += 1
            stats["bytes_recomputed"] += v.nbytes
            notes.append(f"{p.op} {p.name!r} recomputed for {len(readers)} late reader(s) of {t!r}")
        return PassResult(stats["num_recomputed"] > 0, stats, notes)
