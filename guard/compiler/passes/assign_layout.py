"""assign_layout: choose NCHW, NHWC or blocked NCHW<b>c per region of 4-D activations.

A *region* is a connected set of nodes that can run in any layout: convolutions and
pooling (``layout`` attribute), elementwise ops whose activation operands have the output's
shape and whose constants can be re-laid at compile time, and channel Concat/Split. For
each candidate layout in ``candidates`` (in order), regions are formed from the nodes not
yet assigned and feasible for it (blocked layouts need every channel count divisible by
the block), and a region switches only when it pays: its layout-sensitive nodes (the ones
a target kernel runs faster) must outnumber the conversions it needs, one per value
entering and one per value leaving. Regions are maximal, so conversions land where a
layout-bound op (Reshape, Gemm, Softmax, a graph input/output) forces them: pushed toward
the graph boundaries. The notes say, per region, which layout it got, how many
conversions were inserted and why (or why it stayed NCHW).

Conversions: ``Transpose`` for NHWC, ``Relayout`` for blocked layouts. Graph outputs keep
their names and NCHW layout.

A channel shuffle (ShuffleNet's ``Reshape [N, g, C/g, H, W] -> Transpose [0, 2, 1, 3, 4] ->
Reshape [N, C, H, W]``) is a permutation of the channels only, so it runs in NHWC as the
same three nodes on the pixel's channel vector (``[N, H, W, g, C/g]``, perm
``[0, 1, 2, 4, 3]``): an NHWC region flows through it where it would otherwise end in a
conversion to NCHW and start again after it (three copies per shuffle). A blocked layout
cannot express it, so the nodes of an NHWC-capable region holding a shuffle are left to
NHWC.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from guard.compiler.ir.core import Graph, Node, Value
from guard.compiler.ir.layout import (
    LAYOUT_OPS,
    block_of,
    channel_axis,
    from_layout_shape,
    relayout_constant,
    to_layout_shape,
)  # fmt: skip
from guard.compiler.ir.shapes import ELEMENTWISE
from guard.compiler.passes.base import Pass, PassResult


@dataclass
class AssignLayout(Pass):
    name = "assign_layout"
    candidates: tuple[str, ...] = ("NCHW16c", "NHWC")
    notes: list[str] = field(default_factory=list)
    _shuffles: dict[int, tuple[Node, Node, Node]] = field(default_factory=dict, init=False)

    def run(self, graph: Graph) -> PassResult:
        if any(n.op == "Relayout" or n.attrs.get("layout", "NCHW") != "NCHW" for n in graph.nodes):
            return PassResult(
                False,
                {"num_regions": 0, "num_transposes_inserted": 0},
                ["layouts already assigned"],
            )
        stats = {
            "num_regions": 0,
            "num_regions_kept_nchw": 0,
            "num_transposes_inserted": 0,
            "num_nodes_relaid": 0,
        }
        notes: list[str] = []
        assigned: set[int] = set()
        self._shuffles = channel_shuffles(graph)
        reserved = self._shuffle_regions(graph) if "NHWC" in self.candidates else set()
        for lay in self.candidates:
            capable = [
                n
                for n in graph.nodes
                if id(n) not in assigned
                and (lay == "NHWC" or id(n) not in reserved)
                and self._capable(graph, n, lay)
            ]
            for region in self._regions(graph, capable):
                anchors = sum(1 for n in region if n.op in LAYOUT_OPS)
                ids = {id(n) for n in region}
                ins, outs = self._boundary(graph, region, ids)
                cost = len(ins) + len(outs)
                label = f"region at {region[0].label()} ({len(region)} nodes, {anchors} conv/pool)"
                if anchors <= cost:
                    if lay == self.candidates[-1]:
                        stats["num_regions_kept_nchw"] += 1
                        notes.append(
                            f"{label}: kept NCHW, {anchors} layout-sensitive nodes do "
                            f"not pay for {cost} conversions"
                        )
                    continue
                self._rewrite(graph, region, ids, ins, outs, lay)
                assigned |= ids
                stats["num_regions"] += 1
                stats["num_transposes_inserted"] += cost
                stats["num_nodes_relaid"] += len(region)
                why_in = ", ".join(repr(v) for v in ins[:3]) + (" ..." if len(ins) > 3 else "")
                why_out = ", ".join(repr(v) for v in outs[:3]) + (" ..." if len(outs) > 3 else "")
                notes.append(
                    f"{label}: {lay}, {cost} conversions inserted (entering: {why_in}; "
                    f"leaving to layout-bound readers or outputs: {why_out})"
                )
        return PassResult(stats["num_regions"] > 0, stats, notes)

    # -- analysis -----------------------------------------------------------------------
    def _ok4(self, v: Value, lay: str) -> bool:
        if len(v.shape) != 4 or v.dtype.kind != "f":
            return False
        b = block_of(lay)
        return b is None or v.shape[1] % b == 0

    def _shuffle_regions(self, g: Graph) -> set[int]:
        """The nodes of the NHWC-capable regions that hold a channel shuffle."""
        capable = [n for n in g.nodes if self._capable(g, n, "NHWC")]
        out: set[int] = set()
        for region in self._regions(g, capable):
            if any(id(n) in self._shuffles for n in region):
                out |= {id(n) for n in region}
        return out

    def _capable(self, g: Graph, n: Node, lay: str) -> bool:
        if id(n) in self._shuffles:
            return lay == "NHWC"
        if len(n.outputs) == 0 or not all(self._ok4(g.values[o], lay) for o in n.outputs):
            return False
        if n.op in LAYOUT_OPS:
            if not self._ok4(g.values[n.inputs[0]], lay):
                return False
            if n.op == "FusedConv":
                extra = n.inputs[n.attrs["anchor_inputs"] :]
                return self._operands_ok(g, extra, n.outputs[0], lay)
            return True
        if n.op in ELEMENTWISE or n.op == "FusedElementwise":
            if n.op == "Cast":
                return False
            return self._operands_ok(g, n.inputs, n.outputs[0], lay)
        if n.op in ("Concat", "Split") and n.attrs["axis"] == 1:
            return all(self._ok4(g.values[i], lay) and not g.is_constant(i) for i in n.inputs)
        return False

    def _operands_ok(self, g: Graph, names: list[str], out: str, lay: str) -> bool:
        shape = g.values[out].shape
        for i in names:
            if not i:
                continue
            data = g.const(i)
            if data is not None:
                if relayout_constant(data, lay, shape[1]) is None:
                    return False
            elif g.values[i].shape != shape:
                return False
        return True

    def _regions(self, g: Graph, capable: list[Node]) -> list[list[Node]]:
        ids = {id(n) for n in capable}
        parent = {id(n): id(n) for n in capable}

        def find(a: int) -> int:
            while parent[a] != a:
                parent[a] = parent[parent[a]]
                a = parent[a]
            return a

        prod = {o: n for n in capable for o in n.outputs}
        for n in capable:
            for i in n.inputs:
                p = prod.get(i)
                if p is not None and id(p) in ids:
                    parent[find(id(n))] = find(id(p))
        groups: dict[int, list[Node]] = {}
        for n in g.nodes:
            if id(n) in ids:
                groups.setdefault(find(id(n)), []).append(n)
        return list(groups.values())

    def _boundary(self, g: Graph, region: list[Node], ids: set[int]) -> tuple[list[str], list[str]]:
        produced = {o for n in region for o in n.outputs}
        ins: list[str] = []
        for n in region:
            data_inputs = (
                n.inputs[:1]
                if n.op in ("Conv", "MaxPool", "AveragePool", "GlobalAveragePool", "GlobalMaxPool")
                else n.inputs
            )
            if n.op == "FusedConv":
                data_inputs = [n.inputs[0], *n.inputs[n.attrs["anchor_inputs"] :]]
            for i in data_inputs:
                if i and i not in produced and not g.is_constant(i) and i not in ins:
                    ins.append(i)
        outs: list[str] = []
        for n in g.nodes:
            if id(n) in ids:
                continue
            for i in n.inputs:
                if i in produced and i not in outs:
                    outs.append(i)
        for o in g.outputs:
            if o in produced and o not in outs:
                outs.append(o)
        return ins, outs

    # -- rewrite ------------------------------------------------------------------------
    def _convert(self, g: Graph, src: str, frm: str, to: str, name: str | None = None) -> Node:
        v = g.values[src]
        nchw = v.shape if frm == "NCHW" else None
        out_shape = to_layout_shape(nchw, to) if nchw is not None else _from(v.shape, frm)
        outs = [name] if name else None
        if "NHWC" in (frm, to) and "NCHW" in (frm, to):
            perm = [0, 2, 3, 1] if to == "NHWC" else [0, 3, 1, 2]
            node = Node("Transpose", [src], [], {"perm": perm}, g.fresh_node("to_" + to.lower()))
        else:
            node = Node(
                "Relayout", [src], [], {"from": frm, "to": to}, g.fresh_node("to_" + to.lower())
            )
        o = outs[0] if outs else g.fresh(f"{src}_{to.lower()}")
        g.values[o] = Value(o, out_shape, v.dtype)
        node.outputs = [o]
        return node

    def _rewrite(
        self, g: Graph, region: list[Node], ids: set[int], ins: list[str], outs: list[str], lay: str
    ) -> None:
        renamed: dict[str, str] = {}
        new_nodes: list[Node] = []
        pending_in = {v: self._convert(g, v, "NCHW", lay) for v in ins}
        for name, node in pending_in.items():
            renamed[name] = node.outputs[0]
        inserted_in: set[str] = set()
        out_set = set(outs)
        for n in g.nodes:
            if id(n) not in ids:
                new_nodes.append(n)
                continue
            for i in n.inputs:
                if i in pending_in and i not in inserted_in:
                    new_nodes.append(pending_in[i])
                    inserted_in.add(i)
            n.inputs = [renamed.get(i, i) for i in n.inputs]
            self._relay_node(g, n, lay)
            back: list[Node] = []
            for k, o in enumerate(n.outputs):
                v = g.values[o]
                # 5-D only between a shuffle's nodes (every other value is 4-D)
                new_shape = _shuffled_shape(v.shape) or to_layout_shape(v.shape, lay)
                if o in out_set:
                    inner = g.fresh(f"{o}_{lay.lower()}")
                    g.values[inner] = Value(inner, new_shape, v.dtype)
                    n.outputs[k] = inner
                    renamed[o] = inner
                    conv = self._convert(g, inner, lay, "NCHW", name=o)
                    g.values[o] = v  # keep the NCHW type for outside readers
                    back.append(conv)
                else:
                    v.shape = new_shape
            new_nodes.append(n)
            new_nodes.extend(back)
        g.nodes = new_nodes

    def _relay_node(self, g: Graph, n: Node, lay: str) -> None:
        if id(n) in self._shuffles:
            _relay_shuffle(g, n)
            return
        if n.op in LAYOUT_OPS:
            n.attrs["layout"] = lay
        if n.op in ("Concat", "Split"):
            n.attrs["axis"] = channel_axis(lay)
            b = block_of(lay)
            if n.op == "Split" and b and n.attrs.get("split"):
                # Blocked: the split axis counts channel blocks (every part is whole blocks,
                # _capable checked each output's channels against the block).
                n.attrs["split"] = [int(s) // b for s in n.attrs["split"]]
        channels = g.values[n.outputs[0]].shape[1]
        start = (
            n.attrs["anchor_inputs"]
            if n.op == "FusedConv"
            else (0 if n.op not in LAYOUT_OPS else len(n.inputs))
        )
        for k in range(start, len(n.inputs)):
            data = g.const(n.inputs[k])
            if data is None:
                continue
            re_laid = relayout_constant(data, lay, channels)
            assert re_laid is not None
            if re_laid.shape != data.shape or lay != "NCHW":
                n.inputs[k] = g.add_constant(None, re_laid, "relaid").name


def _from(shape: tuple[int, ...], frm: str) -> tuple[int, ...]:
    return from_layout_shape(shape, frm)


def channel_shuffles(g: Graph) -> dict[int, tuple[Node, Node, Node]]:
    """Each node of a channel shuffle of a 4-D float NCHW value -> its three nodes:
    Reshape to [N, g, C/g, H, W] (the shape an attribute), Transpose [0, 2, 1, 3, 4], Reshape back
    to [N, C, H, W], the two values between them read by the next node only."""
    readers = g.consumers()
    found: dict[int, tuple[Node, Node, Node]] = {}
    for r1 in g.nodes:
        if r1.op != "Reshape" or len(r1.inputs) != 1:
            continue
        x, mid = g.values[r1.inputs[0]], g.values[r1.outputs[0]]
        if len(x.shape) != 4 or x.dtype.kind != "f" or len(mid.shape) != 5:
            continue
        n, c, h, w = x.shape
        if mid.shape[0] != n or mid.shape[3:] != (h, w) or mid.shape[1] * mid.shape[2] != c:
            continue
        chain = [r1]
        for op in ("Transpose", "Reshape"):
            v = chain[-1].outputs[0]
            nxt = readers.get(v, [])
            if v in g.outputs or len(nxt) != 1 or nxt[0].op != op:
                break
            chain.append(nxt[0])
        if len(chain) < 3:
            continue
        t, r2 = chain[1], chain[2]
        if t.attrs.get("perm") != [0, 2, 1, 3, 4] or g.values[r2.outputs[0]].shape != x.shape:
            continue
        for node in chain:
            found[id(node)] = (r1, t, r2)
    return found


def _shuffled_shape(shape: tuple[int, ...]) -> tuple[int, ...] | None:
    """The NHWC shape of a shuffle's 5-D value (None for any other)."""
    if len(shape) != 5:
        return None
    n_, a, b, h, w = shape
    return (n_, h, w, a, b)


def _relay_shuffle(g: Graph, n: Node) -> None:
    """A node of a channel shuffle, re-laid to NHWC (its input already is)."""
    if n.op == "Transpose":
        n.attrs["perm"] = [0, 1, 2, 4, 3]
        return
    shape = g.values[n.outputs[0]].shape
    nhwc = _shuffled_shape(shape) or to_layout_shape(shape, "NHWC")
    n.attrs["shape"] = list(nhwc)
