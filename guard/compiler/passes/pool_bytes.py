"""pool_bytes: a MaxPool of a monotone chain on bytes pools the bytes, then runs the chain.

For a function f that never decreases, ``max(f(x_i)) = f(max(x_i))``, in float32 too:
every step here (a Cast from a byte to float32, adding or subtracting a constant,
multiplying or dividing by a positive one, Relu, Clip) is a non-decreasing function of
its input after rounding, so the composition is, and no NaN comes from a byte. So
``MaxPool(DQ(q) * c)`` is ``DQ(MaxPool(q)) * c`` bit for bit: the pool reads one byte an
element instead of four (the byte MaxPool, codegen/quant/pool.py) and the chain runs on
the pooled elements only (PP-OCR cls: a 200 x 2 x 96 dequantize became 200 x 1 x 48).

Fires on a FusedElementwise with one run-time byte input of the output's shape, whose
only reader is the MaxPool and whose steps form one chain from that input with constant
operands that are scalars or per channel (the pool never mixes channels). A constant
that is zero or negative under a Mul or Div, a step outside the list, or a constant on
the left of a Sub or Div (decreasing) declines.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from guard.compiler.ir.core import Graph, Node, dtype_from_name
from guard.compiler.passes.base import Pass, PassResult, single_consumer

BYTES = (np.dtype(np.uint8), np.dtype(np.int8))
MONOTONE = ("Add", "Sub", "Mul", "Div", "Relu", "Clip")


@dataclass
class PoolBytes(Pass):
    name = "pool_bytes"

    def run(self, graph: Graph) -> PassResult:
        consumers = graph.consumers()
        producers = graph.producers()
        notes: list[str] = []
        moved: dict[int, list[Node]] = {}
        gone: set[int] = set()
        for pool in graph.nodes:
            if pool.op != "MaxPool" or len(pool.outputs) != 1:
                continue
            p = producers.get(pool.inputs[0])
            if p is None or p.op != "FusedElementwise":
                continue
            why = self._decline(graph, p, pool, consumers)
            if why:
                notes.append(f"{pool.label()}: {why}")
                continue
            x = next(v for v in p.inputs if not graph.is_constant(v))
            out = graph.values[pool.outputs[0]]
            pooled = graph.fresh(f"{pool.outputs[0]}_bytes")
            graph.values[pooled] = type(out)(pooled, out.shape, graph.values[x].dtype)
            new_pool = Node("MaxPool", [x], [pooled], dict(pool.attrs), pool.name)
            chain = Node("FusedElementwise", [pooled if v == x else v for v in p.inputs],
                         list(pool.outputs), dict(p.attrs), p.name)  # fmt: skip
            gone.add(id(p))
            moved[id(pool)] = [new_pool, chain]
        if moved:
            nodes: list[Node] = []
            for n in graph.nodes:
                if id(n) not in gone:
                    nodes += moved.get(id(n), [n])
            graph.nodes = nodes
            graph.prune_values()
        return PassResult(bool(moved), {"num_pools_on_bytes": len(moved)}, notes)

    def _decline(
        self, graph: Graph, p: Node, pool: Node, consumers: dict[str, list[Node]]
    ) -> str | None:
        y = graph.values[p.outputs[0]]
        if single_consumer(graph, p.outputs[0], consumers) is not pool or len(p.outputs) != 1:
            return "its input has another reader or is a graph output"
        runtime = [i for i, v in enumerate(p.inputs) if not graph.is_constant(v)]
        if len(runtime) != 1 or graph.values[p.inputs[runtime[0]]].dtype not in BYTES:
            return "its input chain does not read one byte tensor"
        if graph.values[p.inputs[runtime[0]]].shape != y.shape or len(y.shape) != 4:
            return "its input chain broadcasts"
        prev: int | str = runtime[0]
        for k, st in enumerate(p.attrs["program"]):
            op, args = st["op"], list(st["args"])
            if op == "Cast":
                if args != [prev] or dtype_from_name(st["attrs"]["to"]) != np.float32:
                    return f"step {k}: a Cast to other than float32"
            elif op in ("Relu", "Clip"):
                if args != [prev]:
                    return f"step {k}: {op} of other than the chain"
            elif op in MONOTONE:
                if len(args) != 2 or args[0] != prev or not isinstance(args[1], int):
                    return f"step {k}: {op} with the chain not on the left of a constant"
                c = graph.const(p.inputs[args[1]])
                if c is None:
                    return f"step {k}: {op} by a run-time value"
                dims = (1,) * (4 - c.ndim) + tuple(c.shape)
                if c.ndim > 4 or any(d != 1 for i, d in enumerate(dims) if i != 1):
                    return f"step {k}: a constant that varies within a channel"
                if op in ("Mul", "Div") and not np.all(c > 0):
                    return f"step {k}: {op} by a constant that is not positive"
            else:
                return f"step {k}: {op} (not known to be monotone)"
            prev = f"s{k}"
        return None
