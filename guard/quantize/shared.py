"""Shared parameters for tensors that data-movement ops join, so those ops can run on bytes.

A Concat of tensors quantised at different scales has to dequantise each input to float
and concatenate floats: four bytes an element, and the planner's concat view holds
floats. With one scale and zero point for the Concat's inputs and output, ``Concat(DQ(a),
DQ(b))`` is ``DQ(Concat(a, b))`` exactly, and the compiler concatenates the bytes
(guard/compiler/passes/fold_qdq.py folds ``DQ -> Concat -> Q`` with one scale, and the
same for each op below, into the op on bytes; move_dequantize.py moves the DQ after a
Concat that nothing quantises again). The same holds for a MaxPool (max
commutes with a non-decreasing map) and a nearest Resize (a gather), whose output shares
its input's parameters as in onnxruntime's QDQ quantiser ("QDQ ops" that keep their
input's scale). Reshape,
Transpose, Squeeze, Unsqueeze, Flatten and Slice join too, but as onnxruntime does only
next to a tensor that is quantised anyway (a conv's input or output, or a group's member):
ShuffleNet's channel shuffle between two convs then moves bytes, and a view of a float
tensor that nothing quantises stays float.

The groups are transitive: DenseNet's dense block concatenates the previous Concat's
output with a new layer's, so a whole block (the MaxPool or transition before it, each
layer's conv output and every Concat of the block) is one group. A group's range is the
union of its members' clipped ranges (each member's ``clip_range``); a member without a
usable profile (unprofiled, non-finite, no width) leaves its whole group to the per-tensor
rule. Members that are graph outputs join the range but stay fp32 (as every graph output
does); initializers never join (a Concat with a constant input is left alone).

A Concat's output joins the range but is quantised only where a conv reads it anyway
(PP-OCRv4 det's FPN): OpenVINO 2024's CPU plugin crashes (SIGSEGV while compiling) on
DenseNet-121 and ShuffleNet when the Concat's output is quantised and read by a
BatchNorm or Relu; the compiler moves the inputs' one DequantizeLinear after the Concat
itself (guard/compiler/passes/move_dequantize.py), so the Concat still runs on bytes.
"""

from __future__ import annotations

from collections.abc import Callable

import onnx
from onnx import helper

from guard.quantize.profile import Profile
from guard.quantize.ranges import activation_params, clip_range

MOVEMENT_OPS = ("MaxPool", "Resize")  # output shares the input's parameters
# the same, but only next to a tensor quantised anyway (onnxruntime's rule for them)
VIEW_OPS = ("Reshape", "Transpose", "Squeeze", "Unsqueeze", "Flatten", "Slice")
Params = tuple[float, int, bool]


def _joins(n: onnx.NodeProto, inits: set[str]) -> list[str] | None:
    """The tensors ``n`` joins into one group, or None."""
    if n.domain not in ("", "ai.onnx"):
        return None
    if n.op_type == "Concat":
        data = [i for i in n.input if i]
        if not data or any(i in inits for i in data):
            return None
        return [*data, n.output[0]]
    if n.op_type not in (*MOVEMENT_OPS, *VIEW_OPS) or len(n.output) != 1 or n.input[0] in inits:
        return None
    attrs = {a.name: helper.get_attribute_value(a) for a in n.attribute}
    if n.op_type == "Resize" and attrs.get("mode", b"nearest") not in (b"nearest", "nearest"):
        return None
    return [n.input[0], n.output[0]]


def shared_groups(
    g: onnx.GraphProto,
    profile: Profile,
    skip: Callable[[onnx.NodeProto], bool],
    wanted: set[str],
    method: str,
    percentile: float,
    symmetric: bool,
) -> list[tuple[list[str], Params]]:
    """Each group of tensors joined by Concat / MaxPool / nearest Resize, or by a view op
    next to a tensor in ``wanted`` (quantised anyway) or in a group (nodes ``skip``
    refuses stay out), whose members all have a usable profile, with its shared
    parameters."""
    inits = {t.name for t in g.initializer}
    parent: dict[str, str] = {}

    def find(t: str) -> str:
        parent.setdefault(t, t)
        while parent[t] != t:
            parent[t] = parent[parent[t]]
            t = parent[t]
        return t

    joins = [(n, j) for n in g.node if not skip(n) and (j := _joins(n, inits))]
    views = [j for n, j in joins if n.op_type in VIEW_OPS]
    chosen = [j for n, j in joins if n.op_type not in VIEW_OPS]
    seen = set(wanted) | {t for j in chosen for t in j}
    while True:  # a chain of views (ShuffleNet's Reshape-Transpose-Reshape) joins in turn
        more = [j for j in views if j not in chosen and seen & set(j)]
        if not more:
            break
        chosen += more
        seen |= {t for j in more for t in j}
    for tensors in chosen:
        for t in tensors:
            parent[find(t)] = find(tensors[0])
    members: dict[str, list[str]] = {}
    for t in parent:
        members.setdefault(find(t), []).append(t)
    out: list[tuple[list[str], Params]] = []
    for group in members.values():
        ranges = []
        for t in group:
            stats = profile.tensors.get(t)
            if stats is None or stats.nonfinite or stats.count == 0:
                break
            ranges.append(clip_range(stats, method, percentile))
        else:
            p = activation_params(
                min(lo for lo, _ in ranges), max(hi for _, hi in ranges), symmetric
            )
            if p is not None:
                out.append((group, p))
    return out
