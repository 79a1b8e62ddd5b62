"""Write the QDQ model: QuantizeLinear/DequantizeLinear pairs where the profile says.

What gets quantised (onnxruntime's QDQ format, which onnxruntime, OpenVINO and the
bundled compiler all read):

- Weights of Conv, ConvTranspose, Gemm and MatMul (float initializers): s8 symmetric, per
  output channel by default (Conv axis 0; ConvTranspose axis 1 when group is 1; Gemm axis
  0 with transB else 1; a 2-D MatMul weight axis 1), stored as int8 with a
  DequantizeLinear. A bias of Conv or Gemm whose input is quantised becomes int32 with
  scale x_scale * w_scale and zero point 0 (what QLinearConv's bias is).
- Activations: each profiled tensor that such an op reads, and the output of each such op
  as the compiled model computes it (after a fused BatchNorm/Relu/...: the first profiled
  tensor down the op's single-consumer chain), u8 asymmetric (s8 with ``symmetric``). All
  consumers but the ones kept fp32 read the dequantised tensor; graph outputs stay fp32.
- Tensors joined by a Concat (transitively), and the input and output of a MaxPool or a
  nearest Resize: one shared scale and zero point, all quantised (quantize/shared.py), so
  those ops can run on bytes.
- Nothing for a node named in ``keep_fp32`` (by op type, node name or output tensor:
  Glow's keep-original-precision): its weights stay fp32 and it reads fp32 inputs.

A tensor whose profile saw NaN or infinity, or whose range has no width (all zeros), is
kept fp32 with a warning naming it: a zero scale would divide by zero.

Names follow onnxruntime's: ``T_QuantizeLinear_Output`` / ``T_DequantizeLinear_Output``,
``W_quantized`` / ``W_scale`` / ``W_zero_point``. The model is converted to opset 13 first
when older (per-axis DequantizeLinear needs 13; onnx.checker refuses it below).
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass, field

import numpy as np
import onnx
from onnx import helper, numpy_helper

from guard.core.errors import ModelError, UsageError
from guard.quantize.opset import convert_opset
from guard.quantize.profile import Profile
from guard.quantize.ranges import (
    DEFAULT_PERCENTILE,
    activation_params,
    clip_range,
    weight_scales,
)
from guard.quantize.shared import shared_groups

MIN_OPSET = 13
Q_SUFFIX = "_QuantizeLinear_Output"
DQ_SUFFIX = "_DequantizeLinear_Output"
# op -> (activation input positions, weight input position, bias input position)
QUANT_OPS: dict[str, tuple[tuple[int, ...], int | None, int | None]] = {
    "Conv": ((0,), 1, 2),
    "ConvTranspose": ((0,), 1, None),
    "Gemm": ((0,), 1, 2),
    "MatMul": ((0, 1), 1, None),
}
# Ops that already are quantised, or consume quantised tensors.
QUANTIZED_OPS = {
    "QuantizeLinear", "DequantizeLinear", "DynamicQuantizeLinear", "QLinearConv",
    "QLinearMatMul", "ConvInteger", "MatMulInteger", "QLinearAdd", "QLinearMul",
    "QLinearConcat", "QLinearGlobalAveragePool", "QLinearAveragePool", "QLinearSigmoid",
    "QLinearLeakyRelu", "QLinearSoftmax", "QGemm", "DynamicQuantizeMatMul", "QAttention",
}  # fmt: skip
_WALK_LIMIT = 8  # single-consumer steps from an op to its fused output (Conv-BN-Add-Relu: 3)


@dataclass(frozen=True)
class QuantOptions:
    method: str = "percentile"
    per_channel: bool = True
    symmetric: bool = False
    keep_fp32: tuple[str, ...] = ()
    percentile: float = DEFAULT_PERCENTILE


@dataclass
class QdqPlan:
    """What the writer did: quantised tensors and weights, and what it kept fp32 and why."""

    activations: dict[str, tuple[float, int, bool]] = field(default_factory=dict)
    weights: list[str] = field(default_factory=list)
    kept: list[tuple[str, str]] = field(default_factory=list)  # (tensor or node, why)
    warnings: list[str] = field(default_factory=list)


def already_quantized(model: onnx.ModelProto) -> str | None:
    """The first node that makes ``model`` a quantised model (its op and name), or None."""
    for n in model.graph.node:
        if n.op_type in QUANTIZED_OPS:
            return f"{n.op_type} node {n.name or n.output[0]!r}"
    return None


def _prepare(model: onnx.ModelProto) -> onnx.ModelProto:
    """A copy at opset >= 13, IR >= 7, initializers not listed as inputs, and Constant nodes
    as initializers (so a weight is always an initializer)."""
    m = onnx.ModelProto()
    m.CopyFrom(model)
    opset = next((o.version for o in m.opset_import if o.domain in ("", "ai.onnx")), 0)
    if opset < MIN_OPSET:
        inits = {t.name for t in m.graph.initializer}
        keep = [i for i in m.graph.input if i.name not in inits]
        del m.graph.input[:]
        m.graph.input.extend(keep)
        m.ir_version = max(m.ir_version, 7)
        try:
            m = convert_opset(m, MIN_OPSET)
        except Exception as exc:  # the converter raises plain RuntimeErrors
            raise ModelError(
                f"cannot convert the model from opset {opset} to {MIN_OPSET} for per-axis "
                f"DequantizeLinear: {' '.join(str(exc).split())[:160]}",
                hint="Re-export the model at opset 13 or later.",
            ) from None
    inits = {t.name for t in m.graph.initializer}
    keep = [i for i in m.graph.input if i.name not in inits]
    del m.graph.input[:]
    m.graph.input.extend(keep)
    # recorded intermediate shapes describe the fp32 graph (often with dynamic dims the
    # exporter left): shape inference re-derives them for the QDQ graph
    del m.graph.value_info[:]
    nodes = []
    for n in m.graph.node:
        attr = {a.name: a for a in n.attribute}
        if n.op_type == "Constant" and n.domain in ("", "ai.onnx") and "value" in attr:
            t = onnx.TensorProto()
            t.CopyFrom(attr["value"].t)
            t.name = n.output[0]
            m.graph.initializer.append(t)
        else:
            nodes.append(n)
    del m.graph.node[:]
    m.graph.node.extend(nodes)
    m.ir_version = max(m.ir_version, 7)
    _fold_batchnorm(m)
    return m


def _fold_batchnorm(m: onnx.ModelProto) -> None:
    """Fold each BatchNormalization that alone reads a Conv's output into the Conv's
    weights, as the compiler's fold_batchnorm does before profiling: with inv = gamma /
    sqrt(var + eps) per output channel, W' = W * inv and b' = (b - mean) * inv + beta. The
    int8 weights are then the ones that run, and no fp32 BN sits between a quantised Conv
    and its output's Q (which keeps runtimes from fusing DQ-Conv-Q). The Conv writes the
    BN's output name, as the fused graph the profile read does."""
    g = m.graph
    inits = {t.name: t for t in g.initializer}
    users: dict[str, int] = defaultdict(int)
    for n in g.node:
        for i in n.input:
            users[i] += 1
    outputs = {o.name for o in g.output}
    producer = {o: n for n in g.node for o in n.output}
    drop = []
    for bn in g.node:
        if bn.op_type != "BatchNormalization" or bn.domain not in ("", "ai.onnx"):
            continue
        attrs = {a.name: helper.get_attribute_value(a) for a in bn.attribute}
        conv = producer.get(bn.input[0])
        if (
            conv is None
            or conv.op_type != "Conv"
            or len(bn.output) != 1
            or attrs.get("training_mode", 0)
            or users[bn.input[0]] != 1
            or bn.input[0] in outputs
            or not all(i in inits for i in bn.input[1:5])
            or conv.input[1] not in inits
            or (len(conv.input) > 2 and conv.input[2] and conv.input[2] not in inits)
        ):
            continue
        gamma, beta, mean, var = (
            numpy_helper.to_array(inits[i]).astype(np.float64) for i in bn.input[1:5]
        )
        w = numpy_helper.to_array(inits[conv.input[1]])
        if w.dtype != np.float32:
            continue
        inv = gamma / np.sqrt(var + float(attrs.get("epsilon", 1e-5)))
        b = (
            numpy_helper.to_array(inits[conv.input[2]]).astype(np.float64)
            if len(conv.input) > 2 and conv.input[2]
            else np.zeros(w.shape[0])
        )
        wf = (w.astype(np.float64) * inv.reshape(-1, *([1] * (w.ndim - 1)))).astype(np.float32)
        bf = ((b - mean) * inv + beta).astype(np.float32)
        names = []
        for arr, old in ((wf, conv.input[1]), (bf, conv.input[2] if len(conv.input) > 2 else "")):
            # a tensor only this Conv reads is replaced in place, else folded under a new name
            name = old if old and users[old] == 1 else f"{old or bn.output[0] + '_bias'}_bn"
            t = numpy_helper.from_array(arr, name)
            if name in inits:
                inits[name].CopyFrom(t)
            else:
                g.initializer.append(t)
                inits[name] = g.initializer[-1]
            names.append(name)
        del conv.input[1:]
        conv.input.extend(names)
        conv.output[0] = bn.output[0]
        drop.append(bn)
    for bn in drop:
        g.node.remove(bn)


def _weight_axis(node: onnx.NodeProto, w: np.ndarray) -> int | None:
    attrs = {a.name: helper.get_attribute_value(a) for a in node.attribute}
    if node.op_type == "Conv":
        return 0
    if node.op_type == "ConvTranspose":
        return 1 if attrs.get("group", 1) == 1 else None
    if node.op_type == "Gemm":
        return 0 if attrs.get("transB", 0) else 1
    if node.op_type == "MatMul" and w.ndim == 2:
        return 1
    return None


def _matches(node: onnx.NodeProto, keep: tuple[str, ...]) -> bool:
    return (
        node.op_type in keep
        or (node.name and node.name in keep)
        or bool(set(node.output) & set(keep))
    )


def write_qdq(
    model: onnx.ModelProto, profile: Profile, opts: QuantOptions
) -> tuple[onnx.ModelProto, QdqPlan]:
    """The QDQ model for ``model`` from ``profile`` (module doc), and what was done."""
    m = _prepare(model)
    g = m.graph
    plan = QdqPlan()
    inits = {t.name: t for t in g.initializer}
    graph_outputs = {o.name for o in g.output}
    consumers: dict[str, list[onnx.NodeProto]] = defaultdict(list)
    producer: dict[str, onnx.NodeProto] = {}
    for n in g.node:
        for i in n.input:
            consumers[i].append(n)
        for o in n.output:
            producer[o] = n

    for k in opts.keep_fp32:
        if not any(_matches(n, (k,)) for n in g.node):
            raise UsageError(
                f"keep_fp32 entry {k!r} matches no op type, node name or output tensor of the "
                "model",
                hint="Name an op type (e.g. Gemm), a node's name or its output tensor.",
            )
    kept_nodes = {id(n) for n in g.node if _matches(n, opts.keep_fp32)}
    for n in g.node:
        if id(n) in kept_nodes:
            plan.kept.append((n.name or n.output[0], "keep_fp32"))

    def usable(t: str) -> tuple[float, int, bool] | None:
        """The activation's parameters, or None (with a warning when the data is bad)."""
        if t in plan.activations:
            return plan.activations[t]
        stats = profile.tensors.get(t)
        if stats is None:
            return None
        node = producer.get(t)
        label = f"tensor {t!r}" + (f" (node {node.name or node.op_type!r})" if node else "")
        if stats.nonfinite:
            why = f"{stats.nonfinite} NaN/infinite values during profiling"
        elif stats.count == 0 or (stats.lo == 0.0 and stats.hi == 0.0):
            why = "its range is all zeros"
        else:
            lo, hi = clip_range(stats, opts.method, opts.percentile)
            p = activation_params(lo, hi, opts.symmetric)
            if p is not None:
                plan.activations[t] = p
                return p
            why = f"its {opts.method} range [{lo:g}, {hi:g}] has no width"
        if all(k != t for k, _ in plan.kept):
            plan.kept.append((t, why))
            plan.warnings.append(f"{label}: {why}; kept fp32 (a zero scale is never written)")
        return None

    def fused_output(t: str) -> str | None:
        for _ in range(_WALK_LIMIT):
            if t in profile.tensors:
                return t
            users = consumers.get(t, [])
            if len(users) != 1 or t in graph_outputs or len(users[0].output) != 1:
                return None
            t = users[0].output[0]
        return None

    act: set[str] = set()
    # tensors a Concat / MaxPool / nearest Resize joins share one range (quantize/shared.py)
    live = [n for n in g.node if n.op_type in QUANT_OPS and id(n) not in kept_nodes]
    wanted = {fused_output(n.output[0]) or "" for n in live} | {
        n.input[p] for n in live for p in QUANT_OPS[n.op_type][0] if p < len(n.input)
    }  # what the loop below may quantise: views next to them join their groups
    concats = {n.output[0] for n in g.node if n.op_type == "Concat"}
    for group, params in shared_groups(g, profile, lambda n: id(n) in kept_nodes, wanted,
                                       opts.method, opts.percentile, opts.symmetric):  # fmt: skip
        for t in group:  # a Concat's output only where a conv reads it (see shared.py)
            plan.activations[t] = params
            if t not in graph_outputs and (t not in concats or t in wanted):
                act.add(t)
    w_dq: dict[tuple[str, int | None], str] = {}  # (weight, axis) -> its dequantised name
    new_inits: list[onnx.TensorProto] = []
    pre_nodes: list[onnx.NodeProto] = []
    weight_scale: dict[tuple[str, int | None], np.ndarray] = {}
    for n in g.node:
        spec = QUANT_OPS.get(n.op_type)
        if spec is None or n.domain not in ("", "ai.onnx") or id(n) in kept_nodes:
            continue
        acts, wpos, bpos = spec
        for pos in acts:
            if pos < len(n.input) and n.input[pos] not in inits and usable(n.input[pos]):
                act.add(n.input[pos])
        out = fused_output(n.output[0])
        if out is not None and out not in graph_outputs and usable(out):
            act.add(out)
        if wpos is None or wpos >= len(n.input) or n.input[wpos] not in inits:
            continue
        wname = n.input[wpos]
        w = numpy_helper.to_array(inits[wname])
        if w.dtype != np.float32:
            continue
        axis = _weight_axis(n, w) if opts.per_channel else None
        key = (wname, axis)
        if key not in w_dq:
            # a weight two ops read along different axes gets a second, suffixed copy
            base = wname if wname not in plan.weights else f"{wname}_axis{axis}"
            tensors, dq, weight_scale[key] = _dequantized_weight(w, base, axis)
            new_inits += tensors
            pre_nodes.append(dq)
            w_dq[key] = dq.output[0]
            plan.weights.append(wname)
        n.input[wpos] = w_dq[key]
        # int32 bias: only when the activation is quantised (its scale is the bias's)
        x = n.input[0]
        if (
            bpos is not None
            and bpos < len(n.input)
            and n.input[bpos] in inits
            and x in plan.activations
            and axis in (0, None)
        ):
            b = numpy_helper.to_array(inits[n.input[bpos]])
            nout = w.shape[0] if n.op_type == "Conv" else w.shape[axis or 0]
            if b.dtype == np.float32 and b.ndim == 1 and b.size == nout:
                sx = np.float32(plan.activations[x][0])
                bs = (sx * np.broadcast_to(weight_scale[key], (nout,))).astype(np.float32)
                base = f"{n.input[bpos]}_{n.name or n.output[0]}"
                tensors, dq = _dequantized_bias(b, bs, base)
                new_inits += tensors
                pre_nodes.append(dq)
                n.input[bpos] = dq.output[0]

    # Q/DQ pairs on activations, right after their producers; consumers read the DQ output.
    def pair(t: str) -> list[onnx.NodeProto]:
        scale, zp, signed = plan.activations[t]
        sn, zn = f"{t}_scale", f"{t}_zero_point"
        new_inits.append(numpy_helper.from_array(np.array(scale, np.float32), sn))
        new_inits.append(numpy_helper.from_array(np.array(zp, np.int8 if signed else np.uint8), zn))
        return [
            helper.make_node("QuantizeLinear", [t, sn, zn], [t + Q_SUFFIX], f"{t}_QuantizeLinear"),
            helper.make_node(
                "DequantizeLinear", [t + Q_SUFFIX, sn, zn], [t + DQ_SUFFIX], f"{t}_DequantizeLinear"
            ),
        ]

    quantized = [t for t in plan.activations if t in act]
    for t in quantized:
        for c in consumers.get(t, []):
            if id(c) in kept_nodes:
                continue
            for pos, i in enumerate(c.input):
                if i == t:
                    c.input[pos] = t + DQ_SUFFIX
    nodes: list[onnx.NodeProto] = list(pre_nodes)
    for i in g.input:
        if i.name in act and i.name in plan.activations:
            nodes += pair(i.name)
    for n in g.node:
        nodes.append(n)
        for o in n.output:
            if o in act and o in plan.activations:
                nodes += pair(o)
    plan.activations = {t: p for t, p in plan.activations.items() if t in act}
    del g.node[:]
    g.node.extend(nodes)
    still_used = {i for n in g.node for i in n.input} | graph_outputs
    old = [t for t in g.initializer if t.name in still_used]
    del g.initializer[:]
    g.initializer.extend(old + new_inits)
    return m, plan


def _dequantized_weight(
    w: np.ndarray, base: str, axis: int | None
) -> tuple[list[onnx.TensorProto], onnx.NodeProto, np.ndarray]:
    """s8 symmetric ``w`` (per slice along ``axis``, or per tensor) with its
    DequantizeLinear: (initializers, the node, the scales)."""
    scales = weight_scales(w, axis)
    shape = [1] * w.ndim
    if axis is not None:
        shape[axis] = -1
    q = np.clip(np.rint(w / scales.reshape(shape)), -127, 127).astype(np.int8)
    zeros = np.zeros(scales.shape, np.int8)
    if axis is None:
        scales, zeros = scales.reshape(()), zeros.reshape(())
    qn, sn, zn = f"{base}_quantized", f"{base}_scale", f"{base}_zero_point"
    ins, outs, name = [qn, sn, zn], [base + DQ_SUFFIX], base + "_DequantizeLinear"
    if axis is None:  # per-tensor
        node = helper.make_node("DequantizeLinear", ins, outs, name=name)
    else:
        node = helper.make_node("DequantizeLinear", ins, outs, name=name, axis=axis)
    tensors = [
        numpy_helper.from_array(q, qn),
        numpy_helper.from_array(scales, sn),
        numpy_helper.from_array(zeros, zn),
    ]
    return tensors, node, scales


def _dequantized_bias(
    b: np.ndarray, scale: np.ndarray, base: str
) -> tuple[list[onnx.TensorProto], onnx.NodeProto]:
    """int32 ``b`` at ``scale`` (x_scale * w_scale per output channel), zero point 0."""
    bq = np.clip(np.rint(b / scale), -(2**31), 2**31 - 1).astype(np.int32)
    qn, sn, zn = f"{base}_quantized", f"{base}_scale", f"{base}_zero_point"
    node = helper.make_node(
        "DequantizeLinear",
        [qn, sn, zn],
        [base + DQ_SUFFIX],
        name=base + "_DequantizeLinear",
        axis=0,
    )
    tensors = [
        numpy_helper.from_array(bq, qn),
        numpy_helper.from_array(scale, sn),
        numpy_helper.from_array(np.zeros(b.size, np.int32), zn),
    ]
    return tensors, node
