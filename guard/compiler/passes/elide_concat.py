"""elide_concat: say which Concat, Split, Slice and Reshape nodes will move no bytes.

One truth for views: the memory planner (guard.compiler.graph.memory) holds the only rules for
aliasing (views, concat/split/slice slices, in place), and the frozen ``MemoryPlan`` it
returns is what the runtime and the code generator read. This pass asks the planner, for
the graph's own order, and records its answer on the graph:

- ``attrs["view"]`` on each node the planner elides: ``"alias"`` (Reshape/Identity: same
  bytes, new shape), ``"concat"`` (each input written straight into its slice of the
  output), ``"split"`` / ``"slice"`` (outputs are contiguous sub-ranges of the input);
- a note for each view-able node that stays a copy, with the planner's reason.

The mark is a report (it shows in the IR text and in pass statistics); the bundled
compiler re-plans after partitioning and scheduling, and only that frozen plan decides.
The reference interpreter ignores the mark. ``bytes_elided`` counts bytes no longer copied.
"""

from __future__ import annotations

from dataclasses import dataclass

from guard.compiler.graph.memory import plan_memory
from guard.compiler.graph.view import view_of_graph
from guard.compiler.ir import ops
from guard.compiler.ir.core import Graph
from guard.compiler.passes.base import Pass, PassResult

_STAT = {
    "alias": "num_views",
    "concat": "num_concats",
    "split": "num_splits",
    "slice": "num_splits",
}


@dataclass
class ElideConcat(Pass):
    name = "elide_concat"

    def run(self, graph: Graph) -> PassResult:
        stats = dict.fromkeys(("num_views", "num_concats", "num_splits", "num_declined"), 0)
        stats["bytes_elided"] = 0
        notes: list[str] = []
        if any(d < 0 for v in graph.values.values() for d in v.shape):
            return PassResult(False, stats, ["dynamic shapes: nothing planned, nothing marked"])
        view = view_of_graph(graph)
        mem = plan_memory(view)
        elided = set(mem.elided_nodes)
        changed = False
        for n, vn in zip(graph.nodes, view.nodes, strict=True):
            kind = ops.TRAITS[n.op].view if n.op in ops.TRAITS else ""
            if not kind:
                continue
            if vn.name in mem.copies:
                stats["num_declined"] += 1
                notes.append(f"{n.label()} stays a copy: {mem.copies[vn.name]}")
            if vn.name not in elided:
                if n.attrs.pop("view", None) is not None:
                    changed = True
                continue
            if n.attrs.get("view") != kind:
                n.attrs["view"] = kind
                changed = True
            stats[_STAT[kind]] += 1
            stats["bytes_elided"] += sum(graph.values[o].nbytes for o in n.outputs)
        return PassResult(changed, stats, notes)
