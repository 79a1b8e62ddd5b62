"""fold_qdq: QDQ patterns become integer ops, as onnxruntime's QDQ transformer folds them.

Compute: ``Q(act(A(DQ(x), DQ(w) [, DQ(b)])))`` with A a Conv, MatMul or Gemm and act an
optional Relu or Clip becomes one ``QLinearConv`` / ``QLinearMatMul``. With x = sx*(qx-zx),
w[c] = sw[c]*(qw[c]-zw[c]) (per tensor, or per output channel c) and b = sx*sw[c]*qb[c]:

    y[c] = sx*sw[c] * (sum (qx-zx)(qw[c]-zw[c]) + qb[c])       (exact in integers)
    q[c] = clamp(rint(y[c]/sy) + zy, qmin, qmax)

and because rint and clamp are monotone, ``Q(Relu(y))`` is the same q with ``qmin = zy``
and ``Q(Clip(y, lo, hi))`` with ``qmin = rint(lo/sy)+zy``, ``qmax = rint(hi/sy)+zy`` (each
also clamped to the type). The bias goes in as int32 (QLinearMatMul's optional 9th input
for Gemm). Hazard: the float graph rounds every product and partial sum to float32 and the
integer op rounds once, so a value whose y/sy lies within float32 rounding of a .5
boundary may land one step apart; with power-of-two scales and small values both are
exact and equal (the test checks both).

Data movement: ``Q(op(DQ(q)))`` with the same per-tensor scale and zero point on both
sides and op one of Reshape, Transpose, Squeeze, Unsqueeze, Flatten, Slice, Identity,
MaxPool, GlobalMaxPool, nearest Resize (selections of input values, order-preserving: ``Q(DQ(q)) == q`` exactly, since
``fl(fl(n*s)/s)`` is within one ulp of the integer n) runs the op on q itself; likewise a
Concat whose inputs are all DQ'd with the output's scale and zero point.

Declines (with a note naming the node): per-axis activation or output scales, a weight
scale along the reduced axis, scales or zero points that are not constants, block
quantisation, dtypes other than u8/s8 (s32 for the bias), a bias whose scale is not
sx*sw, Gemm with alpha != 1, transA, or a transposed non-constant B, and intermediate
values with another reader or that are graph outputs.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from guard.compiler.ir.core import Graph, Node, dtype_name, value_range
from guard.compiler.passes.base import Pass, PassResult, single_consumer

ANCHORS = frozenset({"Conv", "MatMul", "Gemm"})
MOVES = frozenset(
    {"Reshape", "Transpose", "Squeeze", "Unsqueeze", "Flatten", "Slice", "Identity",
     "MaxPool", "GlobalMaxPool", "Resize"}
)  # fmt: skip
INT8 = frozenset({np.dtype(np.uint8), np.dtype(np.int8)})


@dataclass(frozen=True)
class QParams:
    """One Q or DQ node's constants: scale (float32), zero point, axis, quantized dtype."""

    node: Node
    scale: np.ndarray
    zp: np.ndarray
    axis: int
    dtype: np.dtype

    @property
    def per_tensor(self) -> bool:
        return self.scale.size == 1

    def same(self, other: QParams) -> bool:
        return (
            self.per_tensor
            and other.per_tensor
            and self.dtype == other.dtype
            and float(self.scale.reshape(-1)[0]) == float(other.scale.reshape(-1)[0])
            and int(self.zp.reshape(-1)[0]) == int(other.zp.reshape(-1)[0])
        )


def qparams(graph: Graph, node: Node | None) -> QParams | str:
    """The node's quantisation constants, or why they cannot be used."""
    if node is None or node.op not in ("QuantizeLinear", "DequantizeLinear"):
        return f"not a QuantizeLinear/DequantizeLinear ({node.op if node else 'an input'})"
    if node.attrs.get("block_size", 0):
        return f"{node.label()} is block-quantised"
    scale = graph.const(node.inputs[1])
    if scale is None or scale.dtype != np.float32:
        return f"{node.label()}'s scale is not a float32 constant"
    zname = node.inputs[2] if len(node.inputs) > 2 else ""
    zp = graph.const(zname) if zname else None
    if zname and zp is None:
        return f"{node.label()}'s zero point is not a constant"
    if node.op == "QuantizeLinear":
        dtype = graph.values[node.outputs[0]].dtype
    else:
        dtype = graph.values[node.inputs[0]].dtype
    if zp is None:
        zp = np.zeros(scale.shape, dtype)
    if scale.size > 1 and zp.size not in (1, scale.size):
        return f"{node.label()}'s zero point does not match its scale's length"
    return QParams(node, scale, zp, int(node.attrs.get("axis", 1)), np.dtype(dtype))


@dataclass
class FoldQdq(Pass):
    name = "fold_qdq"
    data_movement: bool = True

    def run(self, graph: Graph) -> PassResult:
        stats = {"num_folded_conv": 0, "num_folded_matmul": 0, "num_folded_gemm": 0,
                 "num_activations": 0, "num_int8_moves": 0, "num_declined": 0}  # fmt: skip
        notes: list[str] = []
        producers = graph.producers()
        consumers = graph.consumers()
        dead: set[int] = set()
        placed: dict[int, Node] = {}
        for q in list(graph.nodes):
            if q.op != "QuantizeLinear" or id(q) in dead:
                continue
            p = producers.get(q.inputs[0])
            if p is None:
                continue
            if p.op in ANCHORS or p.op in ("Relu", "Clip"):
                match = self._match_compute(graph, q, p, producers, consumers)
                if isinstance(match, str):
                    stats["num_declined"] += 1
                    notes.append(f"kept {q.label()}: {match}")
                    continue
                node, absorbed = match
                kind = {"Conv": "conv", "MatMul": "matmul", "Gemm": "gemm"}[absorbed[0].op]
                stats[f"num_folded_{kind}"] += 1
                stats["num_activations"] += len(absorbed) - 1
            elif self.data_movement and (p.op in MOVES or p.op == "Concat"):
                match = self._match_move(graph, q, p, producers, consumers)
                if isinstance(match, str):
                    notes.append(f"kept {p.label()} in float: {match}")
                    continue
                node, absorbed = match
                stats["num_int8_moves"] += 1
            else:
                continue
            for n in absorbed:
                dead.add(id(n))
            dead.add(id(q))
            placed[id(q)] = node
            for n in absorbed:
                for o in n.outputs:
                    consumers.pop(o, None)
            for i in node.inputs:
                consumers.setdefault(i, []).append(node)
        if not placed:
            return PassResult(False, stats, notes)
        graph.nodes = [
            placed.get(id(n), n) for n in graph.nodes if id(n) not in dead or id(n) in placed
        ]
        drop_unread_dequantize(graph)
        return PassResult(True, stats, notes)

    # -- compute: DQ -> Conv/MatMul/Gemm (-> Relu/Clip) -> Q ------------------------------
    def _match_compute(
        self,
        graph: Graph,
        q: Node,
        p: Node,
        producers: dict[str, Node],
        consumers: dict[str, list[Node]],
    ) -> tuple[Node, list[Node]] | str:
        act: Node | None = None
        anchor = p
        if p.op in ("Relu", "Clip"):
            act = p
            a = producers.get(p.inputs[0])
            if a is None or a.op not in ANCHORS:
                return f"{p.label()} is not fed by a Conv, MatMul or Gemm"
            if single_consumer(graph, a.outputs[0], consumers) is not act:
                return f"{a.label()}'s result has another reader or is a graph output"
            if act.op == "Clip" and len([i for i in act.inputs if i]) > 1:
                return f"{act.label()}'s bounds are not constants"
            anchor = a
        if single_consumer(graph, (act or anchor).outputs[0], consumers) is not q:
            return f"{(act or anchor).label()}'s result has another reader or is a graph output"
        qy = qparams(graph, q)
        if isinstance(qy, str):
            return qy
        if not qy.per_tensor:
            return f"{q.label()} quantises per axis (QLinear outputs take one scale)"
        if qy.dtype not in INT8:
            return f"{q.label()} quantises to {dtype_name(qy.dtype)} (folds take u8/s8)"
        qx = qparams(graph, producers.get(anchor.inputs[0]))
        qw = qparams(graph, producers.get(anchor.inputs[1]))
        for what, qp in (("input", qx), ("weight", qw)):
            if isinstance(qp, str):
                return f"{anchor.label()}'s {what}: {qp}"
        assert isinstance(qx, QParams) and isinstance(qw, QParams)
        if not qx.per_tensor:
            return f"{anchor.label()}'s input is quantised per axis (needs one scale)"
        if qx.dtype not in INT8 or qw.dtype not in INT8:
            return (
                f"{anchor.label()} reads {dtype_name(qx.dtype)} x {dtype_name(qw.dtype)} "
                "(folds take u8/s8)"
            )
        x_q, w_q = qx.node.inputs[0], qw.node.inputs[0]
        w_shape = graph.values[w_q].shape
        attrs: dict[str, Any]
        if anchor.op == "Conv":
            n_out = w_shape[0]
            if not qw.per_tensor and (qw.axis != 0 or qw.scale.size != n_out):
                return f"{anchor.label()}'s weight scale is not per output channel (axis 0)"
            op, attrs = "QLinearConv", dict(anchor.attrs)
            w_in = w_q
            sw, zw = qw.scale, qw.zp
        else:
            op, attrs = "QLinearMatMul", {}
            trans_b = anchor.op == "Gemm" and anchor.attrs.get("transB", 0)
            if anchor.op == "Gemm":
                if anchor.attrs.get("transA", 0) or anchor.attrs.get("alpha", 1.0) != 1.0:
                    return f"{anchor.label()} has transA or alpha != 1"
                if len(anchor.inputs) > 2 and anchor.attrs.get("beta", 1.0) != 1.0:
                    return f"{anchor.label()} scales its bias (beta != 1)"
            n_axis = 0 if trans_b else len(w_shape) - 1
            n_out = w_shape[n_axis]
            if not qw.per_tensor and (qw.axis != n_axis or len(w_shape) != 2):
                return (
                    f"{anchor.label()}'s weight scale runs along axis {qw.axis}, not the "
                    "output columns (a scale along K cannot leave the sum)"
                )
            w_in = w_q
            if trans_b:
                w_const = graph.const(w_q)
                if w_const is None:
                    return f"{anchor.label()} transposes a non-constant B"
                w_in = graph.add_constant(None, np.ascontiguousarray(w_const.T), "qdq_wt").name
            sw, zw = qw.scale, qw.zp
        bias = self._bias(graph, anchor, producers, qx, qw, n_out)
        if isinstance(bias, str):
            return bias
        bounds = self._bounds(act, qy)
        if isinstance(bounds, str):
            return bounds
        attrs.update(bounds)

        def c(data: np.ndarray, hint: str) -> str:
            return graph.add_constant(None, np.ascontiguousarray(data), hint).name

        per = (n_out,) if not qw.per_tensor else ()
        ins = [
            x_q, c(qx.scale.reshape(()), "qdq_sx"), c(qx.zp.reshape(()).astype(qx.dtype), "qdq_zx"),
            w_in, c(sw.reshape(per), "qdq_sw"),
            c(np.broadcast_to(zw.reshape(-1), per or (1,)).reshape(per).astype(qw.dtype), "qdq_zw"),
            c(qy.scale.reshape(()), "qdq_sy"), c(qy.zp.reshape(()).astype(qy.dtype), "qdq_zy"),
        ]  # fmt: skip
        if bias is not None:
            ins.append(c(bias, "qdq_bias"))
        out = graph.values[q.outputs[0]]
        node = Node(op, ins, list(q.outputs), attrs, anchor.name)
        out.dtype = qy.dtype
        absorbed = [anchor] + ([act] if act else [])
        return node, absorbed

    def _bias(
        self,
        graph: Graph,
        anchor: Node,
        producers: dict[str, Node],
        qx: QParams,
        qw: QParams,
        n_out: int,
    ) -> np.ndarray | None | str:
        if len(anchor.inputs) < 3 or not anchor.inputs[2]:
            return None
        qb = qparams(graph, producers.get(anchor.inputs[2]))
        if isinstance(qb, str):
            return f"{anchor.label()}'s bias: {qb}"
        data = graph.const(qb.node.inputs[0])
        if data is None or data.dtype != np.int32 or np.any(qb.zp != 0):
            return f"{anchor.label()}'s bias is not a constant int32 with zero point 0"
        if data.size not in (1, n_out):
            return f"{anchor.label()}'s bias is not per output channel"
        # The bias must be in the accumulator's units, sx*sw; onnxruntime writes exactly
        # that scale (to float32 rounding), and an integer whose rescale moves by less
        # than 1e-5 relative rounds back to itself.
        acc_scale = (qx.scale.astype(np.float64).reshape(()) * qw.scale.astype(np.float64)).reshape(
            -1
        )
        ratio = qb.scale.astype(np.float64).reshape(-1) / acc_scale
        if not np.all(np.abs(ratio - 1.0) < 1e-5):
            return f"{anchor.label()}'s bias scale is not input scale x weight scale"
        b = np.rint(np.broadcast_to(data.reshape(-1), (n_out,)).astype(np.float64) * ratio)
        return b.astype(np.int32)

    def _bounds(self, act: Node | None, qy: QParams) -> dict[str, int] | str:
        if act is None:
            return {}
        lo_t, hi_t = (int(v) for v in value_range(qy.dtype))
        s = np.float32(qy.scale.reshape(-1)[0])
        zy = int(qy.zp.reshape(-1)[0])
        if act.op == "Relu":
            lo, hi = zy, hi_t
        else:
            mn, mx = act.attrs.get("min"), act.attrs.get("max")

            def q(v: Any, default: int) -> int:
                if v is None:
                    return default
                f = np.float32(np.asarray(v).reshape(-1)[0])
                if not np.isfinite(f):
                    return default
                return int(np.clip(np.rint(f / s) + zy, lo_t, hi_t))

            lo, hi = q(mn, lo_t), q(mx, hi_t)
        out: dict[str, int] = {}
        if lo > lo_t:
            out["qmin"] = max(lo, lo_t)
        if hi < hi_t:
            out["qmax"] = min(hi, hi_t)
        return out

    # -- data movement: DQ -> op -> Q with one scale ---------------------------------------
    def _match_move(
        self,
        graph: Graph,
        q: Node,
        p: Node,
        producers: dict[str, Node],
        consumers: dict[str, list[Node]],
    ) -> tuple[Node, list[Node]] | str:
        if single_consumer(graph, p.outputs[0], consumers) is not q or len(p.outputs) != 1:
            return "its result has another reader or is a graph output"
        if p.op == "Resize" and (
            p.attrs.get("mode") != "nearest"
            or p.attrs.get("coordinate_transformation_mode") == "tf_crop_and_resize"
        ):
            return "only a nearest Resize without crop selects input values"
        qy = qparams(graph, q)
        if isinstance(qy, str):
            return qy
        if not qy.per_tensor or qy.dtype not in INT8:
            return f"{q.label()} is per axis or not u8/s8"
        data_inputs = p.inputs if p.op == "Concat" else p.inputs[:1]
        new_inputs = list(p.inputs)
        for k, name in enumerate(data_inputs):
            qx = qparams(graph, producers.get(name))
            if isinstance(qx, str):
                return f"input {name!r}: {qx}"
            if not qx.same(qy):
                return f"input {name!r} has another scale, zero point or dtype than {q.label()}"
            new_inputs[k] = qx.node.inputs[0]
        node = Node(p.op, new_inputs, list(q.outputs), dict(p.attrs), p.name)
        graph.values[q.outputs[0]].dtype = qy.dtype
        return node, [p]


def drop_unread_dequantize(graph: Graph) -> None:
    """Remove the DequantizeLinear nodes a fold left with no reader (the weights', the
    bias', an activation's) and the values they alone held."""
    uses = graph.use_counts()
    graph.nodes = [
        n for n in graph.nodes
        if not (n.op == "DequantizeLinear" and not uses.get(n.outputs[0], 0))
    ]  # fmt: skip
    graph.prune_values()
