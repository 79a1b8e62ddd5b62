"""fuse_integer_epilogue: an integer convolution and the requantise chain that reads its
int32 accumulator become one node that writes the chain's output, so no int32 tensor
lives in the arena.

fold_integer_conv leaves ``ConvInteger(qx, qw, zx, zw)`` (or ``ConvTransposeInteger``)
followed by ``Cast(acc, f32) * scale[c] + bias[c]`` and whatever float steps follow (a
BatchNormalization, an activation, the next QuantizeLinear: Div, Round, Add, Clip, Cast
to u8), which fuse_elementwise makes one FusedElementwise. The accumulator between them
is four bytes an element where the chain's output is one: on PP-OCRv4 det at 640x640 the
largest tensor of the int8 arena (12.5 MiB) and 70 MiB of its tensors in all.

When the accumulator's only reader is such a FusedElementwise of the same shape whose
other inputs are float32 constants that vary along the channel axis at most, whose every
read of the accumulator is a Cast to float32, and which writes u8, s8 or float32 from
float steps (the program quant/byte_lanes.py runs in float lanes), the pair becomes
``FusedConvInteger`` (``FusedConvTransposeInteger``): the conv's inputs and attributes,
``anchor_inputs`` 4, the chain's constants after them and its program with the
accumulator read as ``"acc"`` (FusedConv's convention). Its reference is the conv's
reference then the chain's (guard.compiler.reference.quant), the composition of the two
nodes, and the kernel runs the program on the accumulator tile in registers
(quant/ukr.py, conv/transpose_blocks.py) where it stored it. A chain that requantises
twice (Q -> DQ -> BatchNorm/activation -> Q: onnxruntime's QDQ PP-OCRv4 det has 38) is
cut after its first byte (merge_elementwise.split_at): the conv writes that byte and the
rest stays a byte -> byte chain, one table lookup an element where the target has VBMI
(codegen/quant/lut.py), as it was before this pass; run whole in the conv's registers, its
three divisions an element made that detector 1.3x slower. So is a chain whose steps after
its first byte cannot join the conv (the detector's last ConvTranspose, a QuantizeLinear
then DequantizeLinear and Sigmoid): the conv writes the byte, the float steps read it.

Runs after sink_casts (the chains are final) and before the layout passes.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from guard.compiler.ir.core import Graph, Node, dtype_from_name
from guard.compiler.passes.base import Pass, PassResult
from guard.compiler.passes.merge_elementwise import split_at

FUSED = {"ConvInteger": "FusedConvInteger", "ConvTransposeInteger": "FusedConvTransposeInteger"}
ANCHOR_INPUTS = 4
OUT_DTYPES = (np.dtype(np.uint8), np.dtype(np.int8), np.dtype(np.float32))
# float steps whose code (codegen/emit_elementwise.py) rounds as the reference does: one
# IEEE operation a step, or a select or min/max of such (no Sigmoid, Tanh, whose code
# approximates; no HardSwish, whose code multiplies by 1/6 where the reference divides)
FLOAT_STEPS = frozenset(
    "Relu LeakyRelu Clip HardSigmoid Add Sub Mul Div Max Min Round Neg Abs Identity".split()
)


def _per_channel(shape: tuple[int, ...], rank: int, k: int) -> bool:
    dims = (1,) * (rank - len(shape)) + tuple(shape)
    return len(shape) <= rank and all(d == 1 for i, d in enumerate(dims) if i != 1) and (
        dims[1] in (1, k)
    )  # fmt: skip


def fusable(graph: Graph, conv: Node, chain: Node) -> str | None:
    """Why ``chain`` cannot join ``conv``'s kernel, or None."""
    acc = graph.values[conv.outputs[0]]
    y = graph.values[chain.outputs[0]]
    if len(chain.outputs) != 1 or y.shape != acc.shape or np.dtype(y.dtype) not in OUT_DTYPES:
        return "its output is not a byte or float32 tensor of the accumulator's shape"
    for v in chain.inputs:
        if v == acc.name:
            continue
        c = graph.values[v] if v else None
        if c is None or not graph.is_constant(v) or np.dtype(c.dtype) != np.float32:
            return f"it reads {v!r}, not a float32 constant"
        if not _per_channel(tuple(c.shape), len(acc.shape), acc.shape[1]):
            return f"its constant {v!r} varies along an axis other than the channels"
    prog = chain.attrs["program"]
    for st in prog:
        reads = [r for r in st["args"] if isinstance(r, int) and chain.inputs[r] == acc.name]
        if st["op"] == "Cast":
            to = np.dtype(dtype_from_name(st["attrs"]["to"]))
            if reads and to != np.float32:
                return "it casts the accumulator to a type other than float32"
            src = st["args"][0]
            if to != np.float32 and not _clipped(prog, src, to):
                return f"its Cast to {to} does not follow a Clip to that type's range"
            continue
        if reads:
            return f"its {st['op']} reads the int32 accumulator"
        if st["op"] not in FLOAT_STEPS:
            return f"its {st['op']} is not a float step of the byte lanes"
    return None


def _clipped(prog: list[dict[str, Any]], src: int | str, to: np.dtype) -> bool:
    """Whether ``src`` is a Clip step whose bounds lie in ``to``'s range (the byte lanes'
    Cast, quant/byte_lanes.py, truncates such a value as numpy's ``astype`` does)."""
    if to not in OUT_DTYPES[:2] or not isinstance(src, str):
        return False
    clip = prog[int(src[1:])]
    lo, hi = clip.get("attrs", {}).get("min"), clip.get("attrs", {}).get("max")
    info = np.iinfo(to)
    return (clip["op"] == "Clip" and len(clip["args"]) == 1 and lo is not None
            and hi is not None and info.min <= lo and hi <= info.max)  # fmt: skip


def _program(chain: Node, acc: str, inputs: list[str]) -> list[dict[str, Any]]:
    """The chain's program over the fused node's inputs (``inputs`` grows by the chain's
    constants), the accumulator read as ``"acc"``."""
    steps = []
    for st in chain.attrs["program"]:
        args: list[int | str] = []
        for r in st["args"]:
            if isinstance(r, str):
                args.append(r)
            elif chain.inputs[r] == acc:
                args.append("acc")
            else:
                if chain.inputs[r] not in inputs[ANCHOR_INPUTS:]:
                    inputs.append(chain.inputs[r])
                args.append(ANCHOR_INPUTS + inputs[ANCHOR_INPUTS:].index(chain.inputs[r]))
        steps.append({**st, "args": args})
    return steps


def _split_point(chain: Node, acc: str, whole: bool) -> int | None:
    """The chain's first Cast to a byte when a later step casts to a byte again (a second
    requantisation, which a byte table runs as one lookup: codegen/quant/lut.py; in the
    conv's registers it would be float steps on every element) or the whole chain cannot
    join the conv (``whole`` False: a Sigmoid after the byte), and the steps after it read
    only it, each other and constants; else None."""
    prog = chain.attrs["program"]
    casts = [i for i, st in enumerate(prog) if st["op"] == "Cast"
             and np.dtype(dtype_from_name(st["attrs"]["to"])) in OUT_DTYPES[:2]]  # fmt: skip
    if not casts or casts[0] == len(prog) - 1 or (whole and len(casts) < 2):
        return None
    k = casts[0]
    for st in prog[k + 1 :]:
        for r in st["args"]:
            if (isinstance(r, str) and int(r[1:]) < k) or (
                isinstance(r, int) and chain.inputs[r] == acc
            ):
                return None
    return k


@dataclass
class FuseIntegerEpilogue(Pass):
    name = "fuse_integer_epilogue"

    def run(self, graph: Graph) -> PassResult:
        consumers = graph.consumers()
        outputs = set(graph.outputs)
        notes: list[str] = []
        fused: dict[int, list[Node]] = {}
        drop: set[int] = set()
        for node in graph.nodes:
            if node.op not in FUSED or node.outputs[0] in outputs:
                continue
            acc = node.outputs[0]
            readers = consumers.get(acc, [])
            if len(readers) != 1 or readers[0].op != "FusedElementwise":
                continue
            why = fusable(graph, node, readers[0])
            k = _split_point(readers[0], acc, why is None)
            parts = [readers[0]] if k is None else list(split_at(graph, readers[0], k))
            if k is not None:
                why = fusable(graph, node, parts[0])
            if why:
                notes.append(f"kept {node.label()}'s accumulator: {why}")
                if k is not None:
                    graph.values.pop(parts[0].outputs[0])
                continue
            inputs = list(node.inputs) + [""] * (ANCHOR_INPUTS - len(node.inputs))
            attrs = {**node.attrs, "anchor_inputs": ANCHOR_INPUTS,
                     "program": _program(parts[0], acc, inputs)}  # fmt: skip
            head = Node(FUSED[node.op], inputs, list(parts[0].outputs), attrs, node.name)
            fused[id(readers[0])] = [head, *parts[1:]]
            drop.add(id(node))
            graph.values.pop(acc)
        if not fused:
            return PassResult(False, {"num_fused": 0}, notes)
        graph.nodes = [m for n in graph.nodes if id(n) not in drop for m in fused.get(id(n), [n])]
        return PassResult(True, {"num_fused": len(fused)}, notes)
