"""elide_concat: mark Concat, Split, Slice, Reshape (and Flatten) as views where possible.

A marked node gets ``attrs["view"]``; part 2's memory planner places its tensors so the
node moves no bytes:

- ``"alias"``  Reshape/Identity: same bytes, new shape (always, unless its input is a
  constant or a graph input that must not be aliased by an output);
- ``"concat"`` Concat: each input is written by its producer straight into its slice of
  the output, which needs every dim before the axis to be 1 (the slices are contiguous),
  every input to be a node output read only by this Concat and no graph output;
- ``"split"`` Split / ``"slice"`` Slice with step 1 on one axis: outputs are contiguous
  sub-ranges of the input, under the same outer-dims-are-1 rule.

The reference interpreter ignores the mark (the semantics are unchanged); the notes say
why each declined node was not marked. ``bytes_elided`` counts the bytes no longer copied.
"""

from __future__ import annotations

from dataclasses import dataclass

from guard.compiler.ir import Graph, Node
from guard.compiler.passes.base import Pass, PassResult


def _outer_is_one(shape: tuple[int, ...], axis: int) -> bool:
    return all(d == 1 for d in shape[:axis])


@dataclass
class ElideConcat(Pass):
    name = "elide_concat"

    def run(self, graph: Graph) -> PassResult:
        uses = graph.use_counts()
        producers = graph.producers()
        stats = {
            "num_views": 0,
            "num_concats": 0,
            "num_splits": 0,
            "num_declined": 0,
            "bytes_elided": 0,
        }
        notes: list[str] = []
        for n in graph.nodes:
            if "view" in n.attrs:
                continue
            reason = self._why_not(graph, n, uses, producers)
            if reason is None:
                continue
            if reason:
                stats["num_declined"] += 1
                notes.append(f"{n.label()} stays a copy: {reason}")
                continue
            kind = {
                "Reshape": "alias",
                "Identity": "alias",
                "Concat": "concat",
                "Split": "split",
                "Slice": "slice",
            }[n.op]
            n.attrs["view"] = kind
            stats[
                "num_views"
                if kind == "alias"
                else ("num_concats" if kind == "concat" else "num_splits")
            ] += 1
            stats["bytes_elided"] += sum(graph.values[o].nbytes for o in n.outputs)
        changed = any(stats[k] for k in ("num_views", "num_concats", "num_splits"))
        return PassResult(changed, stats, notes)

    def _why_not(
        self, g: Graph, n: Node, uses: dict[str, int], producers: dict[str, Node]
    ) -> str | None:
        """None: not a candidate; "": can be a view; otherwise the reason it cannot."""
        if n.op in ("Reshape", "Identity"):
            src = n.inputs[0]
            if g.is_constant(src):
                return "its input is a constant (it folds instead)"
            if n.outputs[0] in g.outputs and src in g.inputs:
                return "a graph output may not alias a graph input"
            return ""
        if n.op == "Concat":
            out = g.values[n.outputs[0]]
            if not _outer_is_one(out.shape, n.attrs["axis"]):
                return f"dims before axis {n.attrs['axis']} are not all 1, slices are strided"
            for i in n.inputs:
                if i not in producers:
                    return f"input {i!r} is a graph input or constant, not written by a node"
                if uses.get(i, 0) != 1 or i in g.outputs:
                    return f"input {i!r} has other readers"
                if producers[i].attrs.get("view") == "concat":
                    return f"input {i!r} is itself an elided concat"
            if len(set(n.inputs)) != len(n.inputs):
                return "an input appears twice"
            return ""
        if n.op in ("Split", "Slice"):
            x = g.values[n.inputs[0]]
            if n.op == "Slice":
                if len(n.attrs["axes"]) != 1 or n.attrs["steps"] != [1]:
                    return "it slices more than one axis or with a step"
                axis = n.attrs["axes"][0]
            else:
                axis = n.attrs["axis"]
            if not _outer_is_one(x.shape, axis):
                return f"dims before axis {axis} are not all 1, parts are strided"
            if g.is_constant(n.inputs[0]):
                return "its input is a constant"
            return ""
        return None
