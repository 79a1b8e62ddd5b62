"""concat_bytes: a Concat of floats that only a quantising chain reads concatenates bytes.

A model quantised with a scale per tensor (onnxruntime's quantize_static gives each input
of a Concat its own: DenseNet's dense blocks, ShuffleNet's downsampling units, PP-OCRv4
det's FPN) dequantises every input to float, concatenates the floats and quantises the
result again: four bytes an element written and read, and the planner's concat view holds
floats (DenseNet-121: 38.8 MiB of float Concat outputs). fold_qdq runs ``DQ -> Concat ->
Q`` on bytes only when every scale is the same; a QuantizeLinear is elementwise, though,
so ``Q(Concat(x_1, ..., x_n)) = Concat(Q(x_1), ..., Q(x_n))`` exactly for any scales: the
same float32 steps on the same values, each element where the Concat puts it.

Fires when the Concat's only reader is a FusedElementwise of the Concat's shape whose
other inputs are constants, whose steps up to its last Cast to a byte type (the
head: a QuantizeLinear, and whatever float steps precede it) read the Concat's output,
each other and those constants, and whose later steps (the tail: a DequantizeLinear, or
none) read only that byte, each other and constants. The head moves into each input and
the Concat concatenates bytes; the reader keeps its tail, on the byte Concat. Per input:

- made by a FusedElementwise that only the Concat reads: the head joins that program (no
  float tensor left at all);
- made by a FusedElementwise of bytes with other readers (DenseNet's chain: the previous
  Concat's DequantizeLinear, which the next layer also reads): a copy of it with the head
  reads those bytes (one ``u8 -> u8`` table, codegen/quant/lut.py), the original stays;
- otherwise the head runs as a node of its own on the float input.

A reader constant that varies along the Concat's axis (DenseNet's per-channel BatchNorm
before the transition's Q) goes to each input as its slice. Declines: a constant or
non-float input, a Concat output that is a graph output or has another reader, a reader
constant that does not broadcast to the Concat's shape.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from guard.compiler.ir.core import Graph, Node, dtype_from_name
from guard.compiler.passes.base import Pass, PassResult
from guard.compiler.passes.merge_elementwise import _merge, split_at

FUSED = "FusedElementwise"
BYTES = (np.dtype(np.uint8), np.dtype(np.int8))


def _head_end(graph: Graph, c: Node, r: Node) -> int | str:
    """The step k where the reader ``r``'s head ends, or why it cannot move."""
    v = c.outputs[0]
    if r.op != FUSED or len(r.outputs) != 1:
        return "its reader is no FusedElementwise"
    if graph.values[r.outputs[0]].shape != graph.values[v].shape:
        return "its reader broadcasts"
    out = graph.values[v].shape
    for x in r.inputs:
        data = graph.const(x) if x != v else None
        if x == v or data is not None and data.size == 1:
            continue
        why = f"its reader reads {x!r}, no constant that broadcasts to it"
        if data is None or data.ndim > len(out):
            return why
        dims = (1,) * (len(out) - data.ndim) + tuple(data.shape)
        if any(d not in (1, o) for d, o in zip(dims, out, strict=True)):
            return why
    prog = r.attrs["program"]
    k = max((i for i, st in enumerate(prog) if st["op"] == "Cast"
             and dtype_from_name(st["attrs"]["to"]) in BYTES), default=-1)  # fmt: skip
    if k < 0:
        return "its reader makes no byte"
    mine = {i for i, x in enumerate(r.inputs) if x == v}
    for st in prog:
        if "acc" in st["args"]:
            return "its reader reads an accumulator"
    for st in prog[k + 1 :]:
        for a in st["args"]:
            if a in mine or isinstance(a, str) and int(a[1:]) < k:
                return "its reader's steps after the byte read the float"
    return k


def _slice(
    graph: Graph, name: str, shape: tuple[int, ...], axis: int, start: int, size: int
) -> str:
    """Constant ``name`` as the input at ``start`` of ``size`` along ``axis`` of a Concat of
    ``shape`` sees it: itself when it does not vary along the axis, else that slice."""
    data = graph.const(name)
    assert data is not None
    data = data.reshape((1,) * (len(shape) - data.ndim) + tuple(data.shape))
    if data.shape[axis] == 1:
        return name
    part = np.take(data, np.arange(start, start + size), axis=axis)
    return graph.add_constant(None, np.ascontiguousarray(part), f"{name}_part").name


@dataclass
class ConcatBytes(Pass):
    name = "concat_bytes"

    def run(self, graph: Graph) -> PassResult:
        notes: list[str] = []
        tried: set[str] = set()
        done = 0
        while True:
            consumers, producers = graph.consumers(), graph.producers()
            for c in graph.nodes:
                if c.op != "Concat" or len(c.outputs) != 1 or c.outputs[0] in tried:
                    continue
                if graph.values[c.outputs[0]].dtype != np.float32:
                    continue
                tried.add(c.outputs[0])
                why = self._decline(graph, c, consumers)
                if isinstance(why, str):
                    notes.append(f"{c.label()}: {why}")
                    continue
                self._rewrite(graph, c, why, consumers, producers)
                done += 1
                break
            else:
                break
        return PassResult(done > 0, {"num_concats_on_bytes": done}, notes)

    def _decline(
        self, graph: Graph, c: Node, consumers: dict[str, list[Node]]
    ) -> tuple[Node, int] | str:
        v = c.outputs[0]
        if v in graph.outputs:
            return "its result is a graph output"
        for x in c.inputs:
            if not x or graph.is_constant(x) or graph.values[x].dtype != np.float32:
                return f"input {x!r} is no run-time float"
        readers = list(dict.fromkeys(consumers.get(v, [])))
        if len(readers) != 1:
            return "its result has several readers"
        k = _head_end(graph, c, readers[0])
        return k if isinstance(k, str) else (readers[0], k)

    def _rewrite(
        self, graph: Graph, c: Node, found: tuple[Node, int],
        consumers: dict[str, list[Node]], producers: dict[str, Node],
    ) -> None:  # fmt: skip
        r, k = found
        v, prog = c.outputs[0], r.attrs["program"]
        byte = np.dtype(dtype_from_name(prog[k]["attrs"]["to"]))
        if k == len(prog) - 1:  # the reader is all head: the Concat writes its result
            out, tail = r.outputs[0], None
        else:
            mid, tail = split_at(graph, r, k)
            out = mid.outputs[0]
        replace: dict[int, Node | None] = {id(c): None, id(r): tail}
        after: dict[int | None, list[Node]] = {}
        of: dict[str, str] = {}
        shape = graph.values[v].shape
        axis = int(c.attrs.get("axis", 0)) % len(shape)
        at = 0
        for x in c.inputs:
            size = graph.values[x].shape[axis]
            at += size
            if x in of:
                continue
            b = of[x] = graph.fresh(f"{x}_q")
            graph.values[b] = type(graph.values[x])(b, graph.values[x].shape, byte)
            ins = [
                x if u == v else _slice(graph, u, shape, axis, at - size, size) for u in r.inputs
            ]
            head = Node(FUSED, ins, [b], {**r.attrs, "program": prog[: k + 1]}, f"{c.name}/{x}")
            p = producers.get(x)
            if p is not None and p.op == FUSED and len(p.outputs) == 1 and x not in graph.outputs:
                alone = all(u is c for u in consumers.get(x, []))
                runtime = [i for i in p.inputs if i and not graph.is_constant(i)]
                if alone:
                    replace[id(p)] = _merge(p, head, head.name)
                    continue
                if all(graph.values[i].dtype in BYTES for i in runtime):
                    head = _merge(p, head, head.name)
            after.setdefault(id(p) if p is not None else None, []).append(head)
        concat = Node("Concat", [of[x] for x in c.inputs], [out], dict(c.attrs), c.name)
        nodes: list[Node] = list(after.get(None, []))
        for n in graph.nodes:
            if n is c:
                nodes.append(concat)
            elif id(n) in replace:
                m = replace[id(n)]
                nodes += [m] if m is not None else []
            else:
                nodes.append(n)
            nodes += after.get(id(n), [])
        graph.nodes = nodes
        graph.prune_values()
