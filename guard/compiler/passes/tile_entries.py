"""Where tile_strips' regions start (guard.compiler.passes.tile_strips).

A region's entry stays whole while the stages after it run in strips. Besides the graph
input, the ladder's tiling (guard.compiler.fit.tile) starts regions at: the output of the
elementwise chain right after the input (``stem_entries``: an int8 build's
QuantizeLinear, so the float input dies before the strips); a tensor on the single-input
chain that ends in a 4-D graph output (``head_entries``: a detector's head); and, from
the furthest of those, the inputs of the channel Concat and nearest Resize that made it
(``head_fronts``: a detector's neck joining upsampled maps), several entries at once.
``entry_axis`` says where an entry's rows are (NHWC or not).
"""

from __future__ import annotations

from guard.compiler.ir import ops
from guard.compiler.ir.core import Graph


def upstream(g: Graph, tensors: list[str]) -> set[str]:
    """Names of the nodes that ``tensors`` depend on."""
    producers = g.producers()
    seen: set[str] = set()
    stack = list(tensors)
    while stack:
        n = producers.get(stack.pop())
        if n is not None and n.name not in seen:
            seen.add(n.name)
            stack += [i for i in n.inputs if i]
    return seen


def head_entries(g: Graph, limit: int = 12) -> list[str]:
    """Interior entries for a head: the tensors on the chain of single-input producers that
    ends in each 4-D graph output, nearest the output first (at most ``limit``)."""
    producers = g.producers()
    out: list[str] = []
    for y in g.outputs:
        t = y
        while len(g.values[t].shape) >= 4 and len(out) < limit:
            n = producers.get(t)
            dyn = [i for i in n.inputs if i and not g.is_constant(i)] if n is not None else []
            if len(dyn) != 1 or dyn[0] in g.inputs:
                break
            t = dyn[0]
            out.append(t)
    return list(dict.fromkeys(out))


def head_fronts(g: Graph, head: str) -> list[tuple[str, ...]]:
    """Several entries for a head starting at ``head``: the run-time inputs of its producer
    when that is a channel Concat or a nearest Resize, then theirs where they are (a
    detector's neck: Resize x3 -> Concat), so the joined feature map runs in strips too;
    one set per level, at most two levels."""
    producers = g.producers()
    out: list[tuple[str, ...]] = []
    front = [head]
    for _ in range(2):
        nxt: list[str] = []
        grew = False
        for t in front:
            n = producers.get(t)
            if n is not None and n.op in ("Concat", "Resize") and len(n.outputs) == 1:
                nxt += [i for i in n.inputs if i and not g.is_constant(i)]
                grew = True
            else:
                nxt.append(t)
        if not grew or any(len(g.values[t].shape) < 4 for t in nxt):
            break
        front = list(dict.fromkeys(nxt))
        out.append(tuple(front))
    return out


def stem_entries(g: Graph, limit: int = 2) -> list[str]:
    """Interior entries for the first stages: the outputs of the elementwise chain right
    after the first 4-D graph input (an int8 build's QuantizeLinear), each the only reader
    of the tensor before it; an entry there lets the graph input die before the strips."""
    ins = [i for i in g.inputs if len(g.values[i].shape) == 4]
    consumers = g.consumers()
    out: list[str] = []
    t = ins[0] if ins else ""
    while t and len(out) < limit:
        readers = consumers.get(t, [])
        if len(readers) != 1 or t in g.outputs:
            break
        (n,) = readers
        elementwise = n.op == "FusedElementwise" or (
            n.op in ops.TRAITS and ops.TRAITS[n.op].elementwise
        )
        dyn = [i for i in n.inputs if i and not g.is_constant(i)]
        if not elementwise or dyn != [t] or len(n.outputs) != 1:
            break
        t = n.outputs[0]
        out.append(t)
    return out


def entry_axis(g: Graph, t: str) -> int:
    """The row axis of ``t``: 1 when its producer writes NHWC (a conv or pool in that
    layout, a Transpose or Relayout to it), else 2 (NCHW and NCHW<b>c)."""
    n = g.producers().get(t)
    if n is None:
        return 2
    nhwc = (
        n.attrs.get("layout") == "NHWC"
        or (n.op == "Transpose" and list(n.attrs.get("perm", [])) == [0, 2, 3, 1])
        or (n.op == "Relayout" and n.attrs.get("to") == "NHWC")
    )
    return 1 if nhwc else 2
