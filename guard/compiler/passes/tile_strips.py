"""tile_strips: run stages of a CNN strip by strip, so intermediates are strips.

The budget ladder's fourth rung (guard.compiler.fit.ladder; MCUNetV2's patch-based
inference, in rows), and the int8 rung's tiling (guard.compiler.fit.int8); the ladder
chooses the regions (guard.compiler.fit.tile, entries from tile_entries). A *region* is
every node between its entries (the graph input: the first stages; or one or more
tensors, which stay whole: e.g. a detector's head from an interior tensor, or from the
maps its neck joins, to the output) and one ``exit`` tensor (a graph output included)
whose ops are row-local: Conv/FusedConv and the integer convolutions (QLinearConv,
ConvInteger: exact integer sums), MaxPool (on bytes too), AveragePool, elementwise ops
(FusedElementwise included: the requantise chains on int32 accumulators and bytes),
QuantizeLinear/DequantizeLinear, Concat across channels, Relayout, Transpose, and the
row upsamples: ConvTranspose/ConvTransposeInteger with stride == kernel and no padding
and a nearest (asymmetric, floor) Resize with an integer scale on the rows (output row r
reads input row r // stride only: no halo; a band is widened to whole input rows and
cropped, and the bands are cut on whole input rows of every such op where the exit's
height allows). Only ``exit`` leaves the region. The rewrite cuts ``exit`` into
``strips`` bands of rows and, per band, computes exactly the rows each region tensor
needs (walked backwards from the band: a kxk, stride-s, dilation-d window needs rows
``lo*s - pad_top .. (hi-1)*s - pad_top + (k-1)*d``), slicing the entries, cropping a
tensor where a reader needs fewer rows than another reader (a fused conv whose epilogue
adds its own input gets that input's output rows as one more epilogue operand), and
then ``Concat`` (on the row axis) joins the bands into ``exit``. The nodes are emitted
band after band, so the schedule keeps one band live at a time.

Algebra: output row r of a window op reads input rows ``r*s - pad_top + i*d``; a band
that starts at input row ``a`` (clipped at 0) shifts that by ``a``, so the band's pads
become ``pad_top' = max(0, -a)`` and ``pad_bottom' = max(0, b - H)``: padding only at the
tensor's true edges, the same zeros the whole-tensor op reads, hence the same arithmetic
per output element (an integer convolution's exact sum included, so its bands equal the
untiled node bit for bit on the reference interpreter too). The generated code's outputs
are bit-identical (tested); the
reference interpreter's convolution is a numpy GEMM whose blocking depends on the row
count, so it may round differently (1e-6 relative on MobileNetV2). The cost is the
halo: rows computed by two bands (``extra_macs``, counted over convolutions).

Hazards (declined, with the reason): a transposed convolution with stride != kernel,
padding, dilation or output padding, a Resize other than nearest-asymmetric-floor with an
integer row scale, a QuantizeLinear/DequantizeLinear quantised per row,
``ceil_mode`` pooling (its last window depends on the
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
from guard.compiler.passes.tile_entries import entry_axis, upstream

# the weights' input position of each convolution (integer ones included: exact integer
# arithmetic, so a band gives the untiled node's bits)
CONV_WEIGHT = {"Conv": 1, "FusedConv": 1, "ConvInteger": 1, "QLinearConv": 3, "FusedConvInteger": 1}
WINDOW_OPS = frozenset({*CONV_WEIGHT, "MaxPool", "AveragePool"})
# transposed convolutions with stride == kernel and no padding: output row r reads input
# row r // stride only (no halo)
UPSAMPLE_OPS = {"ConvTranspose": 1, "ConvTransposeInteger": 1, "FusedConvTransposeInteger": 1}
QDQ_OPS = frozenset({"QuantizeLinear", "DequantizeLinear"})
_CONV_ATTRS = {"anchor_inputs", "dilations", "group", "layout", "pads", "program", "strides",
               "kernel_shape"}  # fmt: skip
_UP_ATTRS = {"dilations", "group", "kernel_shape", "output_padding", "pads", "strides",
             "anchor_inputs", "program"}  # fmt: skip
_POOL_ATTRS = {"ceil_mode", "count_include_pad", "dilations", "kernel_shape", "layout", "pads",
               "strides", "storage_order"}  # fmt: skip


@dataclass(frozen=True)
class Region:
    entry: str
    exit: str
    nodes: tuple[int, ...]  # indices into graph.nodes, topological
    h_axis: dict[str, int] = field(default_factory=dict)  # row axis of each region tensor
    entries: tuple[str, ...] = ()  # every entry (a head may start at several), ``entry`` first


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
        allowed = _CONV_ATTRS if n.op in CONV_WEIGHT else _POOL_ATTRS
        if set(n.attrs) - allowed:
            return f"attributes {sorted(set(n.attrs) - allowed)} are not tiled"
        if n.attrs.get("ceil_mode", 0):
            return "ceil_mode pooling"
        if len(n.attrs.get("pads", [])) != 4:
            return "not a 2-D window"
        want = 1 if n.attrs.get("layout") == "NHWC" else 2
        if ax != want:
            return "row axis does not match the layout"
    elif n.op in UPSAMPLE_OPS:
        why = _upsample_decline(g, n, ax)
        if why:
            return why
    elif n.op == "Resize":
        why = _resize_decline(g, n, ax)
        if why:
            return why
    elif n.op in QDQ_OPS:
        axis = int(n.attrs.get("axis", 1)) % len(out.shape)
        if any(x and g.is_constant(x) and g.values[x].nbytes > g.values[x].dtype.itemsize
               for x in n.inputs[1:]) and axis == ax:  # fmt: skip
            return "quantised per row"
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
    if "anchor_inputs" in n.attrs and (n.op in WINDOW_OPS or n.op in UPSAMPLE_OPS):
        # a fused epilogue (FusedConv, or an integer conv's fused requantise chain)
        for x in n.inputs[int(n.attrs["anchor_inputs"]) :]:
            if x and not g.is_constant(x) and g.values[x].shape != out.shape:
                return "an epilogue operand is broadcast"
    h[n.outputs[0]] = ax
    return None


def _upsample_decline(g: Graph, n: Node, ax: int) -> str | None:
    """Why a transposed convolution is not a row upsample (None when it is)."""
    if set(n.attrs) - _UP_ATTRS:
        return f"attributes {sorted(set(n.attrs) - _UP_ATTRS)} are not tiled"
    w = g.values[n.inputs[UPSAMPLE_OPS[n.op]]].shape
    if len(w) != 4 or ax != 2:
        return "not a 2-D transposed convolution on rows"
    s = int(n.attrs.get("strides", [1, 1])[0])
    if s != w[2] or any(int(p) for p in n.attrs.get("pads", [])):
        return "a transposed convolution with stride != kernel or padding"
    if int(n.attrs.get("dilations", [1, 1])[0]) != 1 or int(
        n.attrs.get("output_padding", [0, 0])[0]
    ):
        return "a dilated or output-padded transposed convolution"
    return None


def _resize_decline(g: Graph, n: Node, ax: int) -> str | None:
    """Why a Resize is not a row upsample: nearest, asymmetric, floor, an integer scale
    on the rows, so output row r reads input row r // scale (None when it is)."""
    a = n.attrs
    if (a.get("mode"), a.get("coordinate_transformation_mode"), a.get("nearest_mode")) != (
        "nearest", "asymmetric", "floor",
    ) or a.get("roi"):  # fmt: skip
        return "a Resize other than nearest, asymmetric, floor"
    scales, out = a.get("scales") or [], a.get("out_shape") or []
    x = g.values[n.inputs[0]].shape
    if len(scales) != len(x) or len(out) != len(x) or float(scales[ax]) != int(scales[ax]):
        return "a Resize without an integer scale on the rows"
    if int(out[ax]) != x[ax] * int(scales[ax]) or int(scales[ax]) < 1:
        return "a Resize whose rows are not the input's times its scale"
    return None


def _up(n: Node, ax: int) -> int:
    """The row stride of a row upsample (a transposed conv or a nearest Resize), else 0."""
    if n.op in UPSAMPLE_OPS:
        return int(n.attrs["strides"][0])
    return int(n.attrs["scales"][ax]) if n.op == "Resize" else 0


Entry = str | tuple[str, ...] | None  # a tensor, several tensors, or the graph input


def regions(g: Graph, entry: Entry = None) -> list[Region]:
    """Every valid region from ``entry`` (default: the first 4-D graph input; else any
    tensor, which stays whole while the stages after it run in strips), one per possible
    exit tensor (a graph output included), in topological order (the smallest first)."""
    if entry is None:
        ins = [i for i in g.inputs if len(g.values[i].shape) == 4][:1]
    else:
        ins = [entry] if isinstance(entry, str) else list(entry)
    if not ins or any(len(g.values[i].shape) < 4 for i in ins):
        return []
    h = {e: entry_axis(g, e) for e in ins}
    inside: list[int] = []
    consumers = g.consumers()
    before = upstream(g, ins)  # of several entries, one may read what made another
    for idx, n in enumerate(g.nodes):
        if n.name in before or not any(i in h for i in n.inputs if i):
            continue
        if _row_op(g, n, h) is not None:
            break  # the first op that is not row-local ends the search
        inside.append(idx)
    out: list[Region] = []
    produced: list[str] = []
    # tensors made so far that a node outside the body reads (or the graph returns)
    left: dict[str, set[str]] = {}
    open_: set[str] = set()
    for k, idx in enumerate(inside):
        n = g.nodes[idx]
        for t in n.inputs:
            if t in left:
                left[t].discard(n.name)
                if not left[t] and t not in g.outputs:
                    open_.discard(t)
        x = n.outputs[0]
        produced.append(x)
        left[x] = {c.name for c in consumers.get(x, [])}
        if left[x] or x in g.outputs:
            open_.add(x)
        # every tensor made so far other than x must be read only inside the region
        if open_ - {x} or g.values[x].shape[h[x]] < 2:
            continue
        body = tuple(inside[: k + 1])
        axes = {t: h[t] for t in (*ins, *produced)}
        out.append(Region(ins[0], x, body, axes, tuple(ins)))
    return out


def _epilogue_reads_input(n: Node) -> bool:
    """A fused conv whose epilogue program reads the conv's own input (input 0: a residual
    of it), whose band has the window's halo rows where the epilogue needs the output's."""
    if n.op not in WINDOW_OPS or "anchor_inputs" not in n.attrs:
        return False
    return any(
        a == 0 and not isinstance(a, bool) for st in n.attrs.get("program", []) for a in st["args"]
    )


def _window(g: Graph, n: Node) -> tuple[int, int, int, int, int]:
    """(kernel rows, stride, dilation, pad top, pad bottom) of a window op."""
    if n.op in CONV_WEIGHT and "kernel_shape" not in n.attrs:
        kh = g.values[n.inputs[CONV_WEIGHT[n.op]]].shape[2]
    else:
        kh = int(n.attrs["kernel_shape"][0])
    s = int(n.attrs.get("strides", [1, 1])[0])
    d = int(n.attrs.get("dilations", [1, 1])[0])
    pads = n.attrs["pads"]
    return kh, s, d, int(pads[0]), int(pads[2])


@dataclass
class TileStrips(Pass):
    """Cut ``exit`` (None: the pass declines) into ``strips`` row bands through its region
    from ``entry`` (None: the first 4-D graph input)."""

    name = "tile_strips"
    exit: str | None = None
    strips: int = 4
    entry: Entry = None

    def run(self, graph: Graph) -> PassResult:
        stats = {"num_strips": 0, "num_nodes_tiled": 0, "macs": 0, "extra_macs": 0}
        region = next((r for r in regions(graph, self.entry) if r.exit == self.exit), None)
        if region is None or self.strips < 2:
            why = f"no row-local region ends at {self.exit!r}" if region is None else "one strip"
            return PassResult(False, stats, [why])
        x = graph.values[region.exit]
        rows = x.shape[region.h_axis[region.exit]]
        # cut on whole rows of every transposed conv's input (no band widened and cropped)
        step = 1
        for i in region.nodes:
            up = graph.nodes[i]
            step *= _up(up, region.h_axis[up.outputs[0]]) or 1
        step = step if rows % step == 0 else 1
        strips = min(self.strips, rows // step)
        cuts = [round(k * rows / step / strips) * step for k in range(strips + 1)]
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
        # node -> input position -> rows it reads (a tensor read twice, as a conv's input
        # and its residual, reads two spans)
        reads: dict[int, dict[int, tuple[int, int]]] = {}
        for n in reversed(body):
            o = n.outputs[0]
            if o not in need:
                continue
            a, b = need[o]
            up = _up(n, r.h_axis[o])
            if up:  # whole input rows: the band is widened to them
                a, b = a // up * up, -(-b // up) * up
                need[o] = (a, b)
            reads[id(n)] = {}
            for pos, x in enumerate(n.inputs):
                if not x or g.is_constant(x):
                    continue
                if n.op in WINDOW_OPS and pos == 0:
                    kh, s, d, pt, _ = _window(g, n)
                    size = g.values[x].shape[r.h_axis[x]]
                    span = (max(a * s - pt, 0), min((b - 1) * s - pt + (kh - 1) * d + 1, size))
                elif up and pos == 0:  # an epilogue operand: (a, b)
                    span = (a // up, b // up)
                else:
                    span = (a, b)
                reads[id(n)][pos] = span
                if pos == 0 and _epilogue_reads_input(n):  # a residual of its own input
                    span = (min(span[0], a), max(span[1], b))
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

        # The entries are read whole from the arena: each reader slices its rows out.
        for e in r.entries:
            need[e] = (0, g.values[e].shape[r.h_axis[e]])
            name[e] = e
        for n in body:
            o = n.outputs[0]
            if id(n) not in reads:
                continue
            got = reads[id(n)]
            ins = [band(x, got[pos]) if pos in got else x for pos, x in enumerate(n.inputs)]
            attrs: dict[str, Any] = dict(n.attrs)
            if n.op in WINDOW_OPS:
                kh, s, d, pt, _ = _window(g, n)
                a, b = need[o]
                size = g.values[n.inputs[0]].shape[r.h_axis[n.inputs[0]]]
                start, end = a * s - pt, (b - 1) * s - pt + (kh - 1) * d + 1
                pads = list(attrs["pads"])
                pads[0], pads[2] = max(0, -start), max(0, end - size)
                attrs["pads"] = pads
            if n.op == "Resize":
                attrs["out_shape"] = list(attrs["out_shape"])
                attrs["out_shape"][r.h_axis[o]] = need[o][1] - need[o][0]
            if _epilogue_reads_input(n):  # the residual's rows: one more epilogue operand
                ins.append(band(n.inputs[0], need[o]))
                attrs["program"] = [
                    {**st, "args": [len(ins) - 1 if a == 0 else a for a in st["args"]]}
                    for st in attrs["program"]
                ]
            shape = list(g.values[o].shape)
            shape[r.h_axis[o]] = need[o][1] - need[o][0]
            strip = f"{o}/strip{k}"
            g.add_node(n.op, ins, [(tuple(shape), g.values[o].dtype)], attrs,
                       name=f"{n.name}/strip{k}", outputs=[strip])  # fmt: skip
            out.append(g.nodes.pop())
            name[o] = strip
        return band(r.exit, (lo, hi))


def conv_macs(g: Graph) -> int:
    """Multiply-accumulates of every convolution, integer ones included (output elements x
    window x in/group; a transposed one: input elements x window x out/group)."""
    total = 0
    for n in g.nodes:
        pos = CONV_WEIGHT.get(n.op, UPSAMPLE_OPS.get(n.op))
        if pos is not None:
            w = g.values[n.inputs[pos]].shape
            t = n.outputs[0] if n.op in CONV_WEIGHT else n.inputs[0]
            total += int(np.prod(g.values[t].shape, dtype=np.int64)) * int(
                np.prod(w[1:], dtype=np.int64)
            )
    return total
