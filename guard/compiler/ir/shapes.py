"""Shape and dtype functions for IR ops: ``infer(node, graph) -> [(shape, dtype), ...]``.

Used by the importer (when ONNX shape inference leaves a dim unknown), by passes that
create nodes, and by the verifier to check every node's recorded output types. Ops without
an entry here are typed by the importer from ONNX inference and only checked for being
static by the verifier.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from guard.compiler.ir.core import Attrs, Graph, Node, Shape, Value, dtype_from_name
from guard.compiler.ir.layout import LAYOUT_OPS, from_layout_shape, to_layout_shape
from guard.compiler.ir.ops import ELEMENTWISE_OPS, family

TypeList = list[tuple[Shape, np.dtype]]
ShapeFn = Callable[[Node, list[Value | None]], TypeList]

# The elementwise families come from the op-traits table (guard.compiler.ir.ops).
UNARY = set(family("unary"))
BINARY = set(family("binary"))
COMPARE = set(family("compare"))
ELEMENTWISE = set(ELEMENTWISE_OPS)
REDUCE = (
    "ReduceMean", "ReduceSum", "ReduceMax", "ReduceMin", "ReduceProd", "ReduceL1", "ReduceL2",
    "ReduceLogSum", "ReduceLogSumExp", "ReduceSumSquare",
)  # fmt: skip
SAME_SHAPE = {
    "Softmax", "LogSoftmax", "LayerNormalization", "LRN", "BatchNormalization",
    "InstanceNormalization", "Hardmax", "CumSum",
}  # fmt: skip


def _bcast(*shapes: Shape) -> Shape:
    return tuple(int(d) for d in np.broadcast_shapes(*shapes))


def _v(vals: list[Value | None], i: int) -> Value:
    v = vals[i] if i < len(vals) else None
    if v is None:
        raise ValueError(f"missing input {i}")
    return v


def elementwise_type(op: str, attrs: Attrs, vals: list[Value]) -> tuple[Shape, np.dtype]:
    shape = _bcast(*(v.shape for v in vals))
    if op in COMPARE:
        return shape, np.dtype(bool)
    if op == "Where":
        return shape, vals[1].dtype
    if op == "Cast":
        return shape, dtype_from_name(attrs["to"])
    return shape, vals[0].dtype


def _program_type(node: Node, vals: list[Value | None], acc: Value | None) -> TypeList:
    steps: list[Value] = []
    for step in node.attrs["program"]:
        args: list[Value] = []
        for ref in step["args"]:
            if ref == "acc":
                assert acc is not None
                args.append(acc)
            elif isinstance(ref, str):
                args.append(steps[int(ref[1:])])
            else:
                args.append(_v(vals, ref))
        shape, dtype = elementwise_type(step["op"], step.get("attrs", {}), args)
        steps.append(Value("_", shape, dtype))
    return [(steps[-1].shape, steps[-1].dtype)]


def _conv(node: Node, vals: list[Value | None]) -> TypeList:
    x, w = _v(vals, 0), _v(vals, 1)
    a = node.attrs
    k = len(x.shape) - 2
    pads, strides, dil = a["pads"], a["strides"], a["dilations"]
    spatial = tuple(
        (x.shape[2 + i] + pads[i] + pads[i + k] - dil[i] * (w.shape[2 + i] - 1) - 1) // strides[i]
        + 1
        for i in range(k)
    )
    return [((x.shape[0], w.shape[0]) + spatial, x.dtype)]


def _pool(node: Node, vals: list[Value | None]) -> TypeList:
    x = _v(vals, 0)
    a = node.attrs
    ks, pads, strides = a["kernel_shape"], a["pads"], a["strides"]
    dil = a.get("dilations", [1] * len(ks))
    k = len(ks)
    out = []
    for i in range(k):
        span = x.shape[2 + i] + pads[i] + pads[i + k] - dil[i] * (ks[i] - 1) - 1
        if a.get("ceil_mode", 0):
            o = -(-span // strides[i]) + 1
            # The last window must start inside the input or left padding (ONNX/ORT rule).
            if (o - 1) * strides[i] >= x.shape[2 + i] + pads[i]:
                o -= 1
        else:
            o = span // strides[i] + 1
        out.append(o)
    types = [(x.shape[:2] + tuple(out), x.dtype)]
    if len(node.outputs) > 1:
        types.append((types[0][0], np.dtype(np.int64)))
    return types


def _gemm(node: Node, vals: list[Value | None]) -> TypeList:
    a, b = _v(vals, 0), _v(vals, 1)
    m = a.shape[1] if node.attrs.get("transA", 0) else a.shape[0]
    n = b.shape[0] if node.attrs.get("transB", 0) else b.shape[1]
    return [((m, n), a.dtype)]


def _matmul(node: Node, vals: list[Value | None]) -> TypeList:
    a, b = _v(vals, 0), _v(vals, 1)
    sa, sb = a.shape, b.shape
    if len(sa) == 1 and len(sb) == 1:
        return [((), a.dtype)]
    if len(sa) == 1:
        return [(sb[:-2] + sb[-1:], a.dtype)]
    if len(sb) == 1:
        return [(sa[:-1], a.dtype)]
    return [(_bcast(sa[:-2], sb[:-2]) + (sa[-2], sb[-1]), a.dtype)]


def _reduce(node: Node, vals: list[Value | None]) -> TypeList:
    x = _v(vals, 0)
    axes = node.attrs["axes"]
    keep = node.attrs.get("keepdims", 1)
    shape = tuple((1 if keep else None) if i in axes else d for i, d in enumerate(x.shape))
    dtype = np.dtype(np.int64) if node.op in ("ArgMax", "ArgMin") else x.dtype
    return [(tuple(d for d in shape if d is not None), dtype)]


def _slice_len(dim: int, start: int, end: int, step: int) -> int:
    return len(range(dim)[slice(start, end, step)])


def _slice(node: Node, vals: list[Value | None]) -> TypeList:
    x = _v(vals, 0)
    shape = list(x.shape)
    a = node.attrs
    for ax, s, e, st in zip(a["axes"], a["starts"], a["ends"], a["steps"], strict=True):
        shape[ax] = _slice_len(x.shape[ax], s, e, st)
    return [(tuple(shape), x.dtype)]


def _gather(node: Node, vals: list[Value | None]) -> TypeList:
    x, idx = _v(vals, 0), _v(vals, 1)
    ax = node.attrs["axis"]
    return [(x.shape[:ax] + idx.shape + x.shape[ax + 1 :], x.dtype)]


def _concat(node: Node, vals: list[Value | None]) -> TypeList:
    ax = node.attrs["axis"]
    xs = [v for v in vals if v is not None]
    shape = list(xs[0].shape)
    shape[ax] = sum(v.shape[ax] for v in xs)
    return [(tuple(shape), xs[0].dtype)]


def _split(node: Node, vals: list[Value | None]) -> TypeList:
    x = _v(vals, 0)
    ax = node.attrs["axis"]
    out = []
    for s in node.attrs["split"]:
        shape = list(x.shape)
        shape[ax] = s
        out.append((tuple(shape), x.dtype))
    return out


def _epilogue(anchor: ShapeFn) -> ShapeFn:
    def fn(node: Node, vals: list[Value | None]) -> TypeList:
        n_anchor = node.attrs["anchor_inputs"]
        (shape, dtype), *_ = anchor(node, vals[:n_anchor])
        return _program_type(node, vals, Value("acc", shape, dtype))

    return fn


SHAPE_FNS: dict[str, ShapeFn] = {
    **{
        op: (
            lambda n, vs: [
                elementwise_type(
                    n.op, n.attrs, [_v(vs, i) for i in range(len(vs)) if vs[i] is not None]
                )
            ]
        )
        for op in ELEMENTWISE
    },  # noqa: E501
    **{op: (lambda n, vs: [(_v(vs, 0).shape, _v(vs, 0).dtype)]) for op in SAME_SHAPE},
    "FusedElementwise": lambda n, vs: _program_type(n, vs, None),
    "Conv": _conv,
    "FusedConv": _epilogue(_conv),
    "MaxPool": _pool,
    "AveragePool": _pool,
    "LpPool": _pool,
    "GlobalAveragePool": lambda n, vs: [
        (_v(vs, 0).shape[:2] + (1,) * (len(_v(vs, 0).shape) - 2), _v(vs, 0).dtype)
    ],  # noqa: E501
    "GlobalMaxPool": lambda n, vs: [
        (_v(vs, 0).shape[:2] + (1,) * (len(_v(vs, 0).shape) - 2), _v(vs, 0).dtype)
    ],  # noqa: E501
    "Gemm": _gemm,
    "FusedGemm": _epilogue(_gemm),
    "MatMul": _matmul,
    "FusedMatMul": _epilogue(_matmul),
    "Reshape": lambda n, vs: [(tuple(n.attrs["shape"]), _v(vs, 0).dtype)],
    "Transpose": lambda n, vs: [
        (tuple(_v(vs, 0).shape[p] for p in n.attrs["perm"]), _v(vs, 0).dtype)
    ],  # noqa: E501
    "Concat": _concat,
    "Split": _split,
    "Slice": _slice,
    "Gather": _gather,
    "GatherElements": lambda n, vs: [(_v(vs, 1).shape, _v(vs, 0).dtype)],
    "Expand": lambda n, vs: [(_bcast(_v(vs, 0).shape, tuple(n.attrs["shape"])), _v(vs, 0).dtype)],  # noqa: E501
    "Tile": lambda n, vs: [
        (
            tuple(d * r for d, r in zip(_v(vs, 0).shape, n.attrs["repeats"], strict=True)),
            _v(vs, 0).dtype,
        )
    ],  # noqa: E501
    "Pad": lambda n, vs: [
        (
            tuple(
                d + n.attrs["pads"][i] + n.attrs["pads"][i + len(_v(vs, 0).shape)]
                for i, d in enumerate(_v(vs, 0).shape)
            ),
            _v(vs, 0).dtype,
        )
    ],  # noqa: E501
    "Resize": lambda n, vs: [(tuple(n.attrs["out_shape"]), _v(vs, 0).dtype)],
    "Fill": lambda n, vs: [(tuple(n.attrs["shape"]), dtype_from_name(n.attrs["dtype"]))],
    **{op: _reduce for op in (*REDUCE, "ArgMax", "ArgMin")},
}


def _relayout(node: Node, vals: list[Value | None]) -> TypeList:
    x = _v(vals, 0)
    nchw = from_layout_shape(x.shape, node.attrs["from"])
    return [(to_layout_shape(nchw, node.attrs["to"]), x.dtype)]


SHAPE_FNS["Relayout"] = _relayout


def _if(node: Node, vals: list[Value | None]) -> TypeList:
    # A specialised If may hold one branch only (the other refused at the bound shapes).
    body = node.attrs.get("then_branch") or node.attrs["else_branch"]
    return [(body.values[o].shape, body.values[o].dtype) for o in body.outputs]


def _loop(node: Node, vals: list[Value | None]) -> TypeList:
    carried = [_v(vals, 2 + k) for k in range(int(node.attrs["carried"]))]
    scans = [
        ((int(node.attrs["scan_length"]), *s), dtype_from_name(d)) for d, s in node.attrs["scan"]
    ]
    return [(v.shape, v.dtype) for v in carried] + scans


# (De)quantization: the shape of x; the quantized type is attrs["to"] (the zero point's),
# the dequantized one the scale's.
SHAPE_FNS["QuantizeLinear"] = lambda n, vs: [(_v(vs, 0).shape, dtype_from_name(n.attrs["to"]))]
SHAPE_FNS["DequantizeLinear"] = lambda n, vs: [(_v(vs, 0).shape, _v(vs, 1).dtype)]
SHAPE_FNS["DynamicQuantizeLinear"] = lambda n, vs: [
    (_v(vs, 0).shape, np.dtype(np.uint8)),
    ((), np.dtype(np.float32)),
    ((), np.dtype(np.uint8)),
]
SHAPE_FNS["If"] = _if
SHAPE_FNS["Loop"] = _loop


def infer(node: Node, graph: Graph) -> TypeList | None:
    """Output types of ``node`` from its inputs' types; None when the op has no function."""
    fn = SHAPE_FNS.get(node.op)
    branch = node.attrs.get("then_branch", node.attrs.get("else_branch"))
    if fn is None or (node.op == "If" and not isinstance(branch, Graph)):
        return None  # a loaded artefact's If names its compiled branches, not their graphs
    vals = [graph.values.get(i) if i else None for i in node.inputs]
    layout = node.attrs.get("layout", "NCHW")
    if layout != "NCHW" and node.op in LAYOUT_OPS:
        x = _v(vals, 0)
        x0 = Value(x.name, from_layout_shape(x.shape, layout), x.dtype)
        if node.op == "FusedConv":
            ((s, d),) = _conv(node, [x0, *vals[1 : node.attrs["anchor_inputs"]]])
            return _program_type(node, vals, Value("acc", to_layout_shape(s, layout), d))
        return [(to_layout_shape(s, layout), d) for s, d in fn(node, [x0, *vals[1:]])]
    return fn(node, vals)
