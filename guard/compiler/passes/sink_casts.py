"""sink_casts: a FusedElementwise that ends by widening a byte to float32 hands that Cast
to its readers, so the tensor between them holds the byte.

fuse_elementwise cuts a chain where a value has several readers or a reader has several
chains in (a residual Add of two dequantized branches), and a lowered DequantizeLinear
(Cast, Sub, Mul) can split there: its Cast to float32 ends the producer, its Sub and Mul
start the reader. The tensor between them then holds bytes as floats: four bytes an
element written and read where one would do, and the producer's program ends in float,
so its steps after its first QuantizeLinear cannot run as a byte table
(codegen/quant/lut.py). Moving the Cast to the front of each reader's program (the
reader's references to the tensor name the new first step) leaves the producer ending at
its byte Cast.

The same steps on the same values: a byte Cast to float32 is exact, so every result is
unchanged bit for bit. Fires only when every reader is a FusedElementwise (which can
take a step), the tensor is no graph output and the Cast reads the step just before it.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from guard.compiler.ir.core import Graph, Node, dtype_from_name
from guard.compiler.passes.base import Pass, PassResult

FUSED = "FusedElementwise"
BYTES = (np.dtype(np.uint8), np.dtype(np.int8))


def _byte_before_widening(prog: list[dict[str, Any]]) -> np.dtype | None:
    """The byte type when the program ends ``Cast(to byte), Cast(to float32)``."""
    if len(prog) < 2:
        return None
    last, prev = prog[-1], prog[-2]
    if last["op"] != "Cast" or last["args"] != [f"s{len(prog) - 2}"]:
        return None
    if dtype_from_name(last["attrs"]["to"]) != np.float32 or prev["op"] != "Cast":
        return None
    to = np.dtype(dtype_from_name(prev["attrs"]["to"]))
    return to if to in BYTES else None


def _prepend_cast(reader: Node, v: str) -> Node:
    """``reader`` with ``Cast(v, float32)`` as its first step, read where it read ``v``."""
    at = reader.inputs.index(v)
    mine = {i for i, x in enumerate(reader.inputs) if x == v}
    steps: list[dict[str, Any]] = [{"op": "Cast", "args": [at], "attrs": {"to": "f32"}}]
    for st in reader.attrs["program"]:
        args = [
            f"s{int(a[1:]) + 1}" if isinstance(a, str) else ("s0" if a in mine else a)
            for a in st["args"]
        ]
        steps.append({**st, "args": args})
    return Node(FUSED, list(reader.inputs), list(reader.outputs),
                {**reader.attrs, "program": steps}, reader.name)  # fmt: skip


@dataclass
class SinkCasts(Pass):
    name = "sink_casts"

    def run(self, graph: Graph) -> PassResult:
        consumers = graph.consumers()
        outputs = set(graph.outputs)
        swap: dict[int, Node] = {}
        sunk = 0
        for node in graph.nodes:
            p = swap.get(id(node), node)
            if p.op != FUSED or len(p.outputs) != 1 or p.outputs[0] in outputs:
                continue
            prog = list(p.attrs["program"])
            byte = _byte_before_widening(prog)
            v = p.outputs[0]
            readers = consumers.get(v, [])
            if byte is None or not readers or any(r.op != FUSED for r in readers):
                continue
            swap[id(node)] = Node(FUSED, list(p.inputs), [v], {**p.attrs, "program": prog[:-1]},
                                  p.name)  # fmt: skip
            for r in dict.fromkeys(readers):
                cur = swap.get(id(r), r)
                swap[id(r)] = _prepend_cast(cur, v)
            graph.values[v] = type(graph.values[v])(v, graph.values[v].shape, byte)
            sunk += 1
        if sunk:
            graph.nodes = [swap.get(id(n), n) for n in graph.nodes]
        return PassResult(sunk > 0, {"num_sunk": sunk}, [])
