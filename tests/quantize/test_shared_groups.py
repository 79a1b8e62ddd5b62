"""quantize/shared.py: tensors a Concat, MaxPool, nearest Resize or a view next to a
quantised tensor joins share one scale and zero point (the union of their ranges), so the
compiler moves bytes (fold_qdq's int8 moves, move_dequantize after a Concat whose output
nothing quantises) and the planner's concat view holds bytes."""

from __future__ import annotations

import numpy as np
import onnx
import onnx.parser
import onnxruntime as ort
from onnx import numpy_helper

from guard.compiler import import_onnx, optimize, run_reference
from guard.quantize.profile import profile_model
from guard.quantize.qdq import QuantOptions, write_qdq
from guard.quantize.ranges import activation_params
from guard.quantize.sqnr import outputs_sqnr

from . import _fixtures as F

# two convs (one through a Relu, one not: different ranges) -> Concat -> MaxPool ->
# nearest Resize -> Concat with a third conv -> Reshape -> Transpose -> Reshape -> Conv
NET = """
<ir_version: 8, opset_import: ["" : 13]>
net (float[1, 3, 8, 8] x) => (float[1, 4, 8, 8] y) {
    a = Conv <pads = [1, 1, 1, 1]> (x, wa, ba)
    ra = Relu (a)
    b = Conv (x, wb, bb)
    c = Concat <axis = 1> (ra, b)
    m = MaxPool <kernel_shape = [2, 2], strides = [2, 2]> (c)
    u = Resize <mode = "nearest"> (m, roi, sc)
    e = Conv (x, we, be)
    c2 = Concat <axis = 1> (u, e)
    v = Reshape (c2, s5)
    t = Transpose <perm = [0, 2, 1, 3, 4]> (v)
    w = Reshape (t, s4)
    l = Resize <mode = "linear"> (w, roi, one)
    y = Conv (l, wy, by)
}
"""


def net():
    rng = np.random.default_rng(3)
    weights = {
        "wa": rng.normal(0, 0.3, (4, 3, 3, 3)), "ba": rng.normal(0, 0.1, 4),
        "wb": rng.normal(0, 0.8, (4, 3, 1, 1)), "bb": rng.normal(0, 0.1, 4),
        "we": rng.normal(0, 0.2, (2, 3, 1, 1)), "be": rng.normal(0, 0.1, 2),
        "wy": rng.normal(0, 0.3, (4, 10, 1, 1)), "by": rng.normal(0, 0.1, 4),
        "roi": np.zeros(0), "sc": [1, 1, 2, 2], "one": [1, 1, 1, 1],
    }  # fmt: skip
    m = onnx.parser.parse_model(NET)
    m.graph.initializer.extend(
        numpy_helper.from_array(np.asarray(v, np.float32), k) for k, v in weights.items()
    )
    shapes = {"s5": [1, 2, 5, 8, 8], "s4": [1, 10, 8, 8]}  # int64 (F.model makes float32)
    m.graph.initializer.extend(numpy_helper.from_array(np.array(v), k) for k, v in shapes.items())
    onnx.checker.check_model(m, full_check=True)
    return m


def _write(**kw):
    m = net()
    prof = profile_model(m, "s", F.samples(8))
    q, plan = write_qdq(m, prof, QuantOptions(method="minmax", **kw))
    return m, prof, q, plan


def test_a_concat_group_shares_the_union_of_its_ranges():
    _, prof, q, plan = _write()
    group = ("ra", "b", "c", "m", "u", "e", "c2", "v", "t", "w")
    quantised = ("ra", "b", "m", "u", "e", "v", "t", "w")  # not the Concats' outputs
    assert {plan.activations[t] for t in quantised} == {plan.activations["u"]}
    assert "c" not in plan.activations and "c2" not in plan.activations
    lo = min(prof.tensors[t].lo for t in group)
    hi = max(prof.tensors[t].hi for t in group)
    assert lo < 0 < prof.tensors["ra"].lo + 1e-9  # b and e reach below the Relu's range
    assert plan.activations["u"] == activation_params(lo, hi, False)
    # the Concats read DQs with one scale; their outputs stay float (OpenVINO, shared.py)
    qs = {n.input[0] for n in q.graph.node if n.op_type == "QuantizeLinear"}
    assert set(quantised) <= qs and not {"c", "c2"} & qs
    # a linear Resize is no selection of input values: its output keeps its own rule
    assert "l" in plan.activations and plan.activations["l"] != plan.activations["u"]


def test_the_compiler_moves_bytes_and_the_outputs_stay_close():
    m, _, q, _ = _write()
    g, _ = optimize(import_onnx(q, {"x": (1, 3, 8, 8)}), "O2")
    dtypes = {n.op: str(g.values[n.outputs[0]].dtype) for n in g.nodes
              if n.op in ("Concat", "MaxPool", "Transpose")}  # fmt: skip
    assert dtypes == {"Concat": "uint8", "MaxPool": "uint8", "Transpose": "uint8"}
    nearest = [n for n in g.nodes if n.op == "Resize" and n.attrs["mode"] == "nearest"]
    assert [str(g.values[n.outputs[0]].dtype) for n in nearest] == ["uint8"]
    feeds = F.samples(6, seed=11).samples
    sess = ort.InferenceSession(m.SerializeToString(), providers=["CPUExecutionProvider"])
    f32 = [sess.run(None, s) for s in feeds]
    i8 = [run_reference(g, s) for s in feeds]
    assert outputs_sqnr(f32, [[r["y"]] for r in i8]) > 25.0


def test_views_join_only_next_to_a_quantised_tensor_and_kept_nodes_stay_out():
    # the Conv after the views kept fp32: w is quantised by nothing, but the views still
    # reach the Concat's group through their input
    _, _, _, plan = _write(keep_fp32=("y",))
    assert plan.activations["w"] == plan.activations["u"]
    # the Concats kept fp32: the MaxPool and Resize still join their inputs, no Concat
    # joins its inputs to its output
    _, _, _, plan = _write(keep_fp32=("Concat",))
    assert plan.activations["m"] == plan.activations["u"]
    assert plan.activations["ra"] != plan.activations["b"]
    assert "e" in plan.activations and plan.activations["e"] != plan.activations["u"]
