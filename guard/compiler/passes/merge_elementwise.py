"""merge_elementwise: a FusedElementwise whose result only another one reads joins it.

fuse_elementwise grows linear chains: a value with two readers ends a chain. A QDQ
model's decomposed HardSwish reads the dequantized BatchNorm result twice (``x + 3`` and
``x * clip(...)``), so the requantise chain after each conv was two kernels: one
``u8 -> f32`` (DequantizeLinear, BatchNorm, Q/DQ) writing four bytes an element, and one
``f32 -> u8`` (the HardSwish with its Q/DQ steps) reading them back. When every reader
of a FusedElementwise's result is one FusedElementwise of the same shape, the producer's
steps go first in the reader's program and the reader's references to that result name
the producer's last step: one kernel, no intermediate tensor, and a ``u8 -> u8`` program
the byte-table kernel (codegen/quant/lut.py) runs 64 bytes an instruction.

The other way round, a chain from bytes to a float result that several ops read (the
dequantized HardSwish a GlobalAveragePool and the SE block's Mul both read) splits at
its last QuantizeLinear when only a DequantizeLinear (Cast, Sub, Mul on constants)
follows: ``u8 -> u8`` (the table) and ``u8 -> f32`` (three vector steps), instead of the
whole float chain per element.

Merges only where the merged program reads bytes alone (its run-time inputs u8/s8): a
chain from an integer conv's int32 or from floats gains no table by growing, and the
longer float chain ran slower than its two kernels (PP-OCRv4 det int8, whose convs'
requantise chains and HardSwish chains merged this way: +1.9 ms of 13 at 1 thread).

A DequantizeLinear left alone on a smaller tensor (the SE block's per-channel gate,
read broadcast by the channel product) is copied into each FusedElementwise that reads
it: the reader takes the gate's byte, and ``DQ(x) * DQ(g[c]) -> Q`` becomes a function
of two bytes (a 256 x 256 table, codegen/quant/lut.py).

The arithmetic is the same steps on the same values in the same types: the merged
program's result equals the two kernels' bit for bit (the intermediate was stored in its
own dtype and read back unchanged). Does not fire across a graph output (it must exist),
a reader of another shape (a broadcast would change the iteration space) or a producer
with several outputs, and ``max_steps`` bounds a program.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from guard.compiler.ir.core import Graph, Node, dtype_from_name
from guard.compiler.passes.base import Pass, PassResult

FUSED = "FusedElementwise"
BYTES = (np.dtype(np.uint8), np.dtype(np.int8))


@dataclass
class MergeElementwise(Pass):
    name = "merge_elementwise"
    max_steps: int = 64

    def run(self, graph: Graph) -> PassResult:
        merged = 0
        notes: list[str] = []
        consumers = graph.consumers()
        producer = {o: n for n in graph.nodes for o in n.outputs}
        outputs = set(graph.outputs)
        gone: set[int] = set()
        replaced: dict[int, Node] = {}
        for node in list(graph.nodes):
            if node.op != FUSED or id(node) in gone:
                continue
            cur = replaced.get(id(node), node)
            while True:
                p = _mergeable(graph, cur, producer, consumers, outputs, gone)
                if p is None:
                    break
                if len(p.attrs["program"]) + len(cur.attrs["program"]) > self.max_steps:
                    notes.append(f"{cur}: {p} not merged (over {self.max_steps} steps)")
                    break
                new = _merge(p, cur)
                gone.add(id(p))
                replaced[id(node)] = new
                for v in set(new.inputs):
                    users = consumers.get(v, [])
                    consumers[v] = [new if u is cur or u is p else u for u in users]
                for o in new.outputs:
                    producer[o] = new
                consumers.pop(p.outputs[0], None)
                cur = new
                merged += 1
        if merged:
            graph.nodes = [replaced.get(id(n), n) for n in graph.nodes if id(n) not in gone]
            graph.prune_values()
        split = 0
        nodes: list[Node] = []
        for node in graph.nodes:
            parts = _split(graph, node) if node.op == FUSED else None
            nodes += parts or [node]
            split += parts is not None
        graph.nodes = nodes
        inlined = _inline_dequantize(graph)
        stats = {"num_merged": merged, "num_split": split, "num_inlined": inlined}
        return PassResult(merged + split + inlined > 0, stats, notes)


def _mergeable(
    graph: Graph, node: Node, producer: dict[str, Node], consumers: dict[str, list[Node]],
    outputs: set[str], gone: set[int],
) -> Node | None:  # fmt: skip
    """The first input of ``node`` made by a FusedElementwise that only ``node`` reads."""
    shape = graph.values[node.outputs[0]].shape
    for v in dict.fromkeys(node.inputs):
        if not v or v in outputs:
            continue
        p = producer.get(v)
        if p is None or p.op != FUSED or id(p) in gone or len(p.outputs) != 1:
            continue
        if graph.values[v].shape != shape:
            continue
        if any(u is not node for u in consumers.get(v, [])):
            continue
        runtime = [
            x for x in (*p.inputs, *node.inputs) if x and x != v and not graph.is_constant(x)
        ]
        if any(graph.values[x].dtype not in BYTES for x in runtime):
            continue  # no table to gain (see the module docstring)
        return p
    return None


def _merge(p: Node, c: Node, name: str | None = None) -> Node:
    """``p``'s steps, then ``c``'s reading ``p``'s last step where they read its result."""
    v = p.outputs[0]
    inputs = list(p.inputs)
    index = {x: i for i, x in enumerate(inputs)}
    steps: list[dict[str, Any]] = [dict(st) for st in p.attrs["program"]]
    last, shift = f"s{len(steps) - 1}", len(steps)
    remap: dict[int, int | str] = {}
    for i, x in enumerate(c.inputs):
        if x == v:
            remap[i] = last
        elif x in index:
            remap[i] = index[x]
        else:
            inputs.append(x)
            index[x] = remap[i] = len(inputs) - 1
    for st in c.attrs["program"]:
        args = [remap[a] if isinstance(a, int) else f"s{int(a[1:]) + shift}" for a in st["args"]]
        steps.append({**st, "args": args})
    attrs = {**c.attrs, "program": steps}
    return Node(FUSED, inputs, list(c.outputs), attrs, name or p.name)


def _split(graph: Graph, node: Node) -> list[Node] | None:
    """``[bytes chain, dequantize]`` for a program from one run-time byte input to a float
    result whose steps after its last Cast to a byte type read only that Cast and
    constants; None otherwise (nothing before the Cast worth a table: under 3 steps)."""
    prog = node.attrs["program"]
    y = graph.values[node.outputs[0]]
    runtime = [i for i, v in enumerate(node.inputs) if not graph.is_constant(v)]
    if len(runtime) != 1 or y.dtype != np.float32 or len(node.outputs) != 1:
        return None
    xv = graph.values[node.inputs[runtime[0]]]
    if xv.dtype not in BYTES or xv.shape != y.shape:
        return None
    k = max((i for i, st in enumerate(prog) if st["op"] == "Cast"
             and dtype_from_name(st["attrs"]["to"]) in BYTES), default=-1)  # fmt: skip
    if k < 2 or k == len(prog) - 1:
        return None
    for st in prog[k + 1 :]:
        for a in st["args"]:
            if a == runtime[0] or isinstance(a, str) and int(a[1:]) < k:
                return None
    return list(split_at(graph, node, k))


def split_at(graph: Graph, node: Node, k: int) -> tuple[Node, Node]:
    """``node`` (a FusedElementwise whose step k is a Cast to a byte type and whose later
    steps read only step k, each other and constants) as two: steps 0..k writing a new byte
    value, and the later steps reading it and writing ``node``'s result."""
    prog = node.attrs["program"]
    y = graph.values[node.outputs[0]]
    to = dtype_from_name(prog[k]["attrs"]["to"])
    mid = graph.fresh(f"{node.outputs[0]}_q")
    graph.values[mid] = type(y)(mid, y.shape, to)
    head = Node(FUSED, list(node.inputs), [mid], {**node.attrs, "program": prog[: k + 1]},
                node.name)  # fmt: skip
    inputs = [mid]
    index: dict[int, int] = {}
    tail: list[dict[str, Any]] = []
    for st in prog[k + 1 :]:
        args: list[int | str] = []
        for a in st["args"]:
            if isinstance(a, str):
                args.append(0 if a == f"s{k}" else f"s{int(a[1:]) - k - 1}")
            else:
                if a not in index:
                    inputs.append(node.inputs[a])
                    index[a] = len(inputs) - 1
                args.append(index[a])
        tail.append({**st, "args": args})
    deq = Node(FUSED, inputs, list(node.outputs), {"program": tail}, f"{node.name}/dequantize")
    return head, deq


DEQUANTIZE = ("Cast", "Sub", "Mul")


def _inline_dequantize(graph: Graph) -> int:
    """Copy each byte -> f32 FusedElementwise of DequantizeLinear steps (Cast, Sub, Mul
    with constants) into its readers when they are all FusedElementwise: the number of
    copies made."""
    consumers = graph.consumers()
    outputs = set(graph.outputs)
    replaced: dict[int, Node] = {}
    gone: set[int] = set()
    for d in graph.nodes:
        if d.op != FUSED or len(d.outputs) != 1 or d.outputs[0] in outputs:
            continue
        prog = d.attrs["program"]
        runtime = [v for v in d.inputs if not graph.is_constant(v)]
        if len(runtime) != 1 or graph.values[runtime[0]].dtype not in BYTES:
            continue
        if graph.values[d.outputs[0]].dtype != np.float32 or len(prog) > len(DEQUANTIZE):
            continue
        ops = [st["op"] for st in prog]
        if not ops or ops[0] != "Cast" or any(o not in DEQUANTIZE[1:] for o in ops[1:]):
            continue
        readers = consumers.get(d.outputs[0], [])
        if not readers or any(r.op != FUSED for r in readers):
            continue
        for r in dict.fromkeys(readers):
            cur = replaced.get(id(r), r)
            replaced[id(r)] = _merge(d, cur, cur.name)
        gone.add(id(d))
    if gone:
        graph.nodes = [replaced.get(id(n), n) for n in graph.nodes if id(n) not in gone]
        graph.prune_values()
    return len(replaced)
