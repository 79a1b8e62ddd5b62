"""sink_casts: a FusedElementwise that ends by dequantizing a byte hands those steps to
its readers, so the tensor between them holds the byte.

fuse_elementwise cuts a chain where a value has several readers (a decomposed HardSwish
reads its input twice), where a reader has several chains in (a residual Add), or at its
step cap; a lowered DequantizeLinear (Cast to float32, Sub, Mul on constants) then ends
the producer, or only its Cast does. The tensor between them holds floats: four bytes an
element written and read where one would do, the producer's program ends in float, so
its steps after its first QuantizeLinear cannot run as a byte table, and the reader's
program starts from float, so it cannot either (codegen/quant/lut.py). Moving the steps
after the producer's last byte Cast (at most ``max_tail``, each reading only that byte,
each other and constants) to the front of each reader's program, the reader's references
to the tensor naming the last of them, leaves the producer ending at the byte and a
reader that starts from it: on PP-OCRv4 det int8, every requantise chain after an
integer conv and every HardSwish chain a byte table.

The same steps on the same values: each reader computes the dequantized value exactly as
the producer did (float32 steps on the byte and the same constants), so every result is
unchanged bit for bit. Fires only when every reader is a FusedElementwise (which can
take the steps) and the tensor is no graph output.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from guard.compiler.ir.core import Graph, Node, dtype_from_name
from guard.compiler.passes.base import Pass, PassResult

FUSED = "FusedElementwise"
BYTES = (np.dtype(np.uint8), np.dtype(np.int8))


def _tail(graph: Graph, p: Node) -> tuple[int, np.dtype] | None:
    """(k, byte type) when ``p``'s program ends at a Cast to a byte (step k) followed by
    steps that read only each other, that byte and constants (a DequantizeLinear: Cast,
    Sub, Mul), the first of them a Cast of step k to float32; else None."""
    prog = p.attrs["program"]
    k = max((i for i, st in enumerate(prog) if st["op"] == "Cast"
             and np.dtype(dtype_from_name(st["attrs"]["to"])) in BYTES), default=-1)  # fmt: skip
    if k < 0 or k == len(prog) - 1:
        return None
    head = prog[k + 1]
    if head["op"] != "Cast" or head["args"] != [f"s{k}"]:
        return None
    if np.dtype(dtype_from_name(head["attrs"]["to"])) != np.float32:
        return None
    for st in prog[k + 1 :]:
        for r in st["args"]:
            if isinstance(r, str) and int(r[1:]) < k or r == "acc":
                return None
            if isinstance(r, int) and not graph.is_constant(p.inputs[r]):
                return None
    return k, np.dtype(dtype_from_name(prog[k]["attrs"]["to"]))


def _prepend(reader: Node, v: str, p: Node, k: int) -> Node:
    """``reader`` with ``p``'s steps after step k first (reading ``v``, the byte, where
    they read step k, and ``p``'s constants as inputs of its own), read where it read
    ``v``."""
    inputs = list(reader.inputs)
    mine = {i for i, x in enumerate(inputs) if x == v}
    tail = p.attrs["program"][k + 1 :]
    steps: list[dict[str, Any]] = []
    for st in tail:
        args: list[int | str] = []
        for r in st["args"]:
            if r == f"s{k}":
                args.append(min(mine))
            elif isinstance(r, str):
                args.append(f"s{int(r[1:]) - k - 1}")
            else:
                if p.inputs[r] not in inputs:
                    inputs.append(p.inputs[r])
                args.append(inputs.index(p.inputs[r]))
        steps.append({**st, "args": args})
    last, shift = f"s{len(tail) - 1}", len(tail)
    for st in reader.attrs["program"]:
        args = [
            f"s{int(r[1:]) + shift}" if isinstance(r, str) else (last if r in mine else r)
            for r in st["args"]
        ]
        steps.append({**st, "args": args})
    return Node(FUSED, inputs, list(reader.outputs), {**reader.attrs, "program": steps},
                reader.name)  # fmt: skip


@dataclass
class SinkCasts(Pass):
    name = "sink_casts"
    max_tail: int = 4  # steps a reader takes over (a DequantizeLinear is three)

    def run(self, graph: Graph) -> PassResult:
        consumers = graph.consumers()
        outputs = set(graph.outputs)
        swap: dict[int, Node] = {}
        sunk = 0
        for node in graph.nodes:
            p = swap.get(id(node), node)
            if p.op != FUSED or len(p.outputs) != 1 or p.outputs[0] in outputs:
                continue
            got = _tail(graph, p)
            v = p.outputs[0]
            readers = list(dict.fromkeys(consumers.get(v, [])))
            if got is None or not readers or any(r.op != FUSED for r in readers):
                continue
            k, byte = got
            if len(p.attrs["program"]) - k - 1 > self.max_tail:
                continue
            for r in readers:
                swap[id(r)] = _prepend(swap.get(id(r), r), v, p, k)
            swap[id(node)] = Node(FUSED, list(p.inputs), [v],
                                  {**p.attrs, "program": p.attrs["program"][: k + 1]},
                                  p.name)  # fmt: skip
            graph.values[v] = type(graph.values[v])(v, graph.values[v].shape, byte)
            sunk += 1
        if sunk:
            graph.nodes = [swap.get(id(n), n) for n in graph.nodes]
        return PassResult(sunk > 0, {"num_sunk": sunk}, [])
