"""tile_strips: run the first stages of a CNN strip by strip, so intermediates are strips.

The budget ladder's fourth rung (guard.compiler.fit.ladder; MCUNetV2's patch-based
inference, in rows). A *region* is every node between one ``entry`` tensor (a graph
input) and one ``exit`` tensor whose ops are row-local: Conv/FusedConv, MaxPool,
AveragePool, elementwise ops (FusedElementwise included), Concat across channels,
Relayout and Transpose. Only ``exit`` leaves the region. The rewrite cuts ``exit`` into
``strips`` bands of rows and, per band, computes exactly the rows each region tensor
needs (walked backwards from the band: a kxk, stride-s, dilation-d window needs rows
``lo*s - pad_top .. (hi-1)*s - pad_top + (k-1)*d``), slicing the entry, cropping a tensor
where a reader needs fewer rows than another reader, and then ``Concat`` (on the row axis)
joins the bands into ``exit``. The nodes are emitted band after band, so the schedule
keeps one band live at a time.

Algebra: output row r of a window op reads input rows ``r*s - pad_top + i*d``; a band
that starts at input row ``a`` (clipped at 0) shifts that by ``a``, so the band's pads
become ``pad_top' = max(0, -a)`` and ``pad_bottom' = max(0, b - H)``: padding only at the
tensor's true edges, the same zeros the whole-tensor op reads, hence the same arithmetic
per output element. The generated code's outputs are bit-identical (tested); the
reference interpreter's convolution is a numpy GEMM whose blocking depends on the row
count, so it may round differently (1e-6 relative on MobileNetV2). The cost is the
halo: rows computed by two bands (``extra_macs``, counted over convolutions).

Hazards (declined, with the reason): ``ceil_mode`` pooling (its last window depends on the
whole height), auto_pad, a constant operand that varies along the row axis, an
elementwise operand broadcast along rows, ops with several outputs, and tensors that
leave the region other than ``exit`` (they would have to exist whole).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np

from guard.compiler.ir import ops
from guard.compiler.ir.core import Graph, Node
from guard.compiler.passes.base import Pass, PassResult

WINDOW_OPS = frozenset({"Conv", "FusedConv", "MaxPool", "AveragePool"})
_CONV_ATTRS = {"anchor_inputs", "dilations", "group", "layout", "pads", "program", "strides",
               "kernel_shape"}  # fmt: skip
_POOL_ATTRS = {"ceil_mode", "count_include_pad", "dilations", "kernel_shape", "layout", "pads",
               "strides", "storage_order"}  # fmt: skip


@dataclass(frozen=True)
class Region:
    entry: str
    exit: str
    nodes: tuple[int, ...]  # indices into graph.nodes, topological
    h_axis: dict[str, int] = field(default_factory=dict)  # row axis of each region tensor


def _row_op(g: Graph, n: Node, h: dict[str, int]) -> str | None:
    """None when ``n`` is row-local given its inputs' row axes (``h``), else why not.
    On success the output's row axis is written into ``h``."""
    if len(n.outputs) != 1:
        return "several outputs"
    dyn = [i for i in n.inputs if i and not g.is_constant(i)]
    axes = {h[i] for i in dyn if i in h}
    if len(axes) != 1 or any(i not in h for i in dyn):
        return "reads a tensor from outside the region"
    ax = axes.pop()
    out = g.values[n.outputs[0]]
    if n.op in WINDOW_OPS:
        allowed = _CONV_ATTRS if n.op in ("Conv", "FusedConv") else _POOL_ATTRS
        if set(n.attrs) - allowed:
            return f"attributes {sorted(set(n.attrs) - allowed)} are not tiled"
        if n.attrs.get("ceil_mode", 0):
            return "ceil_mode pooling"
        if len(n.attrs.get("pads", [])) != 4:
            return "not a 2-D window"
        want = 1 if n.attrs.get("layout") == "NHWC" else 2
        if ax != want:
            return "row axis does not match the layout"
        if n.op == "FusedConv":
            anchor = int(n.attrs.get("anchor_inputs", 3))
            for x in n.inputs[anchor:]:
                if x and not g.is_constant(x) and g.values[x].shape != out.shape:
                    return "an epilogue operand is broadcast"
    elif n.op == "Concat":
        if int(n.attrs.get("axis", 0)) % len(out.shape) == ax:
            return "concatenates along rows"
    elif n.op == "Relayout":
        # NCHW <-> NCHW<b>c keeps rows on axis 2; NHWC moves them (a square image would
        # not show it in the shapes, so the attributes decide)
        ends = (str(n.attrs.get("from", "")), str(n.attrs.get("to", "")))
        if not all(e == "NCHW" or (e.startswith("NCHW") and e.endswith("c")) for e in ends):
            return "relayout moves the row axis"
    elif n.op == "Transpose":
        ax = list(n.attrs["perm"]).index(ax)
    elif n.op == "FusedElementwise" or (n.op in ops.TRAITS and ops.TRAITS[n.op].elementwise):
        for x in n.inputs:
            if not x:
                continue
            shape = g.values[x].shape
            pos = ax - (len(out.shape) - len(shape))
            if g.is_constant(x):
                if 0 <= pos < len(shape) and shape[pos] != 1:
                    return "a constant operand varies along rows"
            elif shape != out.shape:
                return "an operand is broadcast"
    else:
        return f"{n.op} is not row-local"
    h[n.outputs[0]] = ax
    return None


def regions(g: Graph, entry: str | None = None) -> list[Region]:
    """Every valid region from ``entry`` (default: the first 4-D graph input), one per
    possible exit tensor, in topological order (the smallest first)."""
    ins = [i for i in g.inputs if len(g.values[i].shape) == 4] if entry is None else [entry]
    if not ins:
        return []
    entry = ins[0]
    h = {entry: 2}
    inside: list[int] = []
    consumers = g.consumers()
    for idx, n in enumerate(g.nodes):
        if not any(i in h for i in n.inputs if i):
            continue
        if _row_op(g, n, h) is not None:
            break  # the first op that is not row-local ends the search
        inside.append(idx)
    out: list[Region] = []
    produced: set[str] = set()
    for k, idx in enumerate(inside):
        produced.add(g.nodes[idx].outputs[0])
        x = g.nodes[idx].outputs[0]
        if x in g.outputs:
            break
        # every tensor made so far other than x must be read only inside the region
        body = inside[: k + 1]
        names = {g.nodes[i].name for i in body}
        leaks = [
            t
            for t in produced
            if t != x and (t in g.outputs or any(c.name not in names for c in consumers.get(t, [])))
        ]
        if leaks or g.values[x].shape[h[x]] < 2:
            continue
        if any(c.name in names for c in consumers.get(x, [])):
            continue
        out.append(Region(entry, x, tuple(body), {t: h[t] for t in (entry, *produced)}))
    return out


def _window(g: Graph, n: Node) -> tuple[int, int, int, int, int]:
    """(kernel rows, stride, dilation, pad top, pad bottom) of a window op."""
    if n.op in ("Conv", "FusedConv") and "kernel_shape" not in n.attrs:
        w = g.values[n.inputs[1]].shape
        kh = w[2]
    else:
        kh = int(n.attrs["kernel_shape"][0])
    s = int(n.attrs.get("strides", [1, 1])[0])
    d = int(n.attrs.get("dilations", [1, 1])[0])
    pads = n.attrs["pads"]
    return kh, s, d, int(pads[0]), int(pads[2])


@dataclass
class TileStrips(Pass):
    """Cut ``exit`` (None: the pass declines) into ``strips`` row bands through its region."""

    name = "tile_strips"
    exit: str | None = None
    strips: int = 4

    def run(self, graph: Graph) -> PassResult:
        stats = {"num_strips": 0, "num_nodes_tiled": 0, "macs": 0, "extra_macs": 0}
        region = next((r for r in regions(graph) if r.exit == self.exit), None)
        if region is None or self.strips < 2:
            why = f"no row-local region ends at {self.exit!r}" if region is None else "one strip"
            return PassResult(False, stats, [why])
        x = graph.values[region.exit]
        rows = x.shape[region.h_axis[region.exit]]
        strips = min(self.strips, rows)
        cuts = [round(k * rows / strips) for k in range(strips + 1)]
        before = conv_macs(graph)
        body = [graph.nodes[i] for i in region.nodes]
        new_nodes: list[Node] = []
        parts = []
        for k in range(strips):
            parts.append(self._strip(graph, region, body, cuts[k], cuts[k + 1], k, new_nodes))
        h = region.h_axis[region.exit]
        concat = Node("Concat", parts, [region.exit], {"axis": h}, f"{region.exit}/strips")
        new_nodes.append(concat)
        last = region.nodes[-1]
        drop = set(region.nodes)
        graph.nodes = [
            m
            for i, n in enumerate(graph.nodes)
            for m in ((new_nodes if i == last else []) if i in drop else [n])
        ]
        graph.prune_values()
        after = conv_macs(graph)
        stats.update(
            num_strips=strips, num_nodes_tiled=len(body), macs=before, extra_macs=after - before
        )
        note = (
            f"strip of {rows // strips} row(s) through {body[0].name}..{body[-1].name} "
            f"({len(body)} nodes, {strips} strips, +{100 * (after - before) / max(before, 1):.1f}%"
            " MACs)"
        )
        return PassResult(True, stats, [note])

    def _strip(
        self,
        g: Graph,
        r: Region,
        body: list[Node],
        lo: int,
        hi: int,
        k: int,
        out: list[Node],
    ) -> str:
        """Emit band ``k`` (exit rows lo..hi) into ``out``; the band's exit tensor name."""
        need: dict[str, tuple[int, int]] = {r.exit: (lo, hi)}
        reads: dict[int, dict[str, tuple[int, int]]] = {}  # node -> input -> rows it reads
        for n in reversed(body):
            o = n.outputs[0]
            if o not in need:
                continue
            a, b = need[o]
            reads[id(n)] = {}
            for pos, x in enumerate(n.inputs):
                if not x or g.is_constant(x):
                    continue
                if n.op in WINDOW_OPS and pos == 0:
                    kh, s, d, pt, _ = _window(g, n)
                    size = g.values[x].shape[r.h_axis[x]]
                    span = (max(a * s - pt, 0), min((b - 1) * s - pt + (kh - 1) * d + 1, size))
                else:
                    span = (a, b)
                reads[id(n)][x] = span
                old = need.get(x)
                need[x] = span if old is None else (min(old[0], span[0]), max(old[1], span[1]))
        name: dict[str, str] = {}

        def band(t: str, rows: tuple[int, int]) -> str:
            """The band tensor of ``t`` holding exactly ``rows`` (a crop when it has more)."""
            have = need[t]
            if rows == have:
                return name[t]
            ax = r.h_axis[t]
            crop = f"{name[t]}/rows{rows[0]}_{rows[1]}"
            if crop not in g.values:
                shape = list(g.values[t].shape)
                shape[ax] = rows[1] - rows[0]
                g.add_node(
                    "Slice", [name[t]], [(tuple(shape), g.values[t].dtype)],
                    {"axes": [ax], "starts": [rows[0] - have[0]], "ends": [rows[1] - have[0]],
                     "steps": [1]}, name=f"{crop}/slice", outputs=[crop],
                )  # fmt: skip
                out.append(g.nodes.pop())
            return crop

        # The entry is read whole from the arena: each reader slices its rows out of it.
        need[r.entry] = (0, g.values[r.entry].shape[r.h_axis[r.entry]])
        name[r.entry] = r.entry
        for n in body:
            o = n.outputs[0]
            if id(n) not in reads:
                continue
            ins = [
                band(x, reads[id(n)][x]) if x in reads[id(n)] else x for x in n.inputs
            ]  # fmt: skip
            attrs: dict[str, Any] = dict(n.attrs)
            if n.op in WINDOW_OPS:
                kh, s, d, pt, _ = _window(g, n)
                a, b = need[o]
                size = g.values[n.inputs[0]].shape[r.h_axis[n.inputs[0]]]
                start, end = a * s - pt, (b - 1) * s - pt + (kh - 1) * d + 1
                pads = list(attrs["pads"])
                pads[0], pads[2] = max(0, -start), max(0, end - size)
                attrs["pads"] = pads
            shape = list(g.values[o].shape)
            shape[r.h_axis[o]] = need[o][1] - need[o][0]
            strip = f"{o}/strip{k}"
            g.add_node(n.op, ins, [(tuple(shape), g.values[o].dtype)], attrs,
                       name=f"{n.name}/strip{k}", outputs=[strip])  # fmt: skip
            out.append(g.nodes.pop())
            name[o] = strip
        return name[r.exit]


def conv_macs(g: Graph) -> int:
    """Multiply-accumulates of every Conv/FusedConv (output elements x window x in/group)."""
    total = 0
    for n in g.nodes:
        if n.op in ("Conv", "FusedConv"):
            w = g.values[n.inputs[1]].shape
            total += int(np.prod(g.values[n.outputs[0]].shape, dtype=np.int64)) * int(
                np.prod(w[1:], dtype=np.int64)
            )
    return total
