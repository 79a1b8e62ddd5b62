"""The profile (after the fp32 passes) and the QDQ writer, checked on small parse_model nets."""

from __future__ import annotations

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import numpy_helper

from guard.compiler import import_onnx, run_reference
from guard.core.errors import UsageError
from guard.quantize.profile import Profile, profile_model
from guard.quantize.qdq import DQ_SUFFIX, QuantOptions, write_qdq
from guard.quantize.sqnr import outputs_sqnr, tensor_errors, top1_agreement

from . import _fixtures as F


def _ort(m: onnx.ModelProto, feeds: dict[str, np.ndarray]) -> list[np.ndarray]:
    s = ort.InferenceSession(m.SerializeToString(), providers=["CPUExecutionProvider"])
    return s.run(None, feeds)


def test_the_profile_sees_the_fused_graph_not_the_onnx_one():
    prof = profile_model(F.convnet(), "src", F.samples(4))
    # Conv+BN+Relu run as one fused op: only its output (the Relu's) is a tensor there
    assert {"x", "r1", "r2", "p", "y"} <= set(prof.tensors)
    assert "c1" not in prof.tensors and "n1" not in prof.tensors and "c2" not in prof.tensors
    assert prof.tensors["r1"].lo >= 0.0 and prof.tensors["r1"].count == 4 * 8 * 8 * 8
    assert prof.ops["r1"].startswith("Fused") and prof.ops["x"] == "input"
    assert "fold_batchnorm" in prof.passes and "assign_layout" not in prof.passes


def test_the_profile_is_a_versioned_artefact_with_a_stable_hash(tmp_path):
    prof = profile_model(F.convnet(), "src", F.samples(3))
    prof.save(tmp_path / "p.json")
    back = Profile.load(tmp_path / "p.json")
    assert back.sha256 == prof.sha256 and back.to_json()["schema_version"] == 1
    again = profile_model(F.convnet(), "src", F.samples(3))
    assert again.sha256 == prof.sha256
    assert profile_model(F.convnet(), "src", F.samples(3, seed=1)).sha256 != prof.sha256
    (tmp_path / "bad.json").write_text('{"kind": "something else"}')
    with pytest.raises(UsageError, match="is not a guard quantization profile"):
        Profile.load(tmp_path / "bad.json")


def test_writer_structure_and_numerics():
    m = F.convnet()
    cal = F.samples(16)
    prof = profile_model(m, "src", cal)
    q, plan = write_qdq(m, prof, QuantOptions(method="minmax"))
    onnx.checker.check_model(q, full_check=True)
    assert next(o.version for o in q.opset_import if o.domain == "") >= 13
    inits = {t.name: numpy_helper.to_array(t) for t in q.graph.initializer}
    # per-channel s8 weights, no fp32 copy left behind
    assert inits["w1_quantized"].dtype == np.int8 and inits["w1_scale"].shape == (8,)
    assert "w1" not in inits and "w3" not in inits
    dq_w1 = next(n for n in q.graph.node if n.output[0] == "w1" + DQ_SUFFIX)
    assert onnx.helper.get_attribute_value(dq_w1.attribute[0]) == 0  # axis
    dq_w3 = next(n for n in q.graph.node if n.output[0] == "w3" + DQ_SUFFIX)
    assert onnx.helper.get_attribute_value(dq_w3.attribute[0]) == 0  # Gemm transB=1: rows
    # int32 bias at x_scale * w_scale, a u8 zero point 0 on the Relu outputs
    sx, sw = inits["x_scale"], inits["w1_scale"]
    assert inits["b1_n1_quantized"].dtype == np.int32  # the Conv now writes the BN's output
    assert np.array_equal(inits["b1_n1_scale"], (sx * sw).astype(np.float32))
    # the BatchNormalization is folded into the Conv's weights before they are quantised
    assert "BatchNormalization" not in {n.op_type for n in q.graph.node}
    assert inits["b3_y_quantized"].dtype == np.int32
    assert inits["r1_zero_point"].dtype == np.uint8 and int(inits["r1_zero_point"]) == 0
    # Q/DQ where the compiled graph has tensors: input, fused outputs; never on c1 or n1
    # and on the Flatten's input, at its output's parameters (quantize/shared.py)
    assert set(plan.activations) == {"x", "r1", "r2", "p", "f"}
    assert plan.activations["p"] == plan.activations["f"]
    assert not any(n.input and n.input[0] in ("c1", "n1") for n in q.graph.node
                   if n.op_type == "QuantizeLinear")  # fmt: skip
    assert [o.name for o in q.graph.output] == ["y"]
    # onnxruntime and the reference interpreter both run it, close to fp32
    feeds = F.samples(8, seed=7).samples
    f32 = [_ort(m, s) for s in feeds]
    i8 = [_ort(q, s) for s in feeds]
    assert outputs_sqnr(f32, i8) > 25.0
    g = import_onnx(q, {"x": (1, 3, 8, 8)})
    ref = [[run_reference(g, s)["y"]] for s in feeds]
    assert outputs_sqnr(i8, ref) > 60.0
    assert top1_agreement(f32, f32) == 1.0


def test_a_fresh_profile_makes_the_same_model_bytes():
    m = F.convnet()
    a, _ = write_qdq(m, profile_model(m, "s", F.samples(4)), QuantOptions())
    b, _ = write_qdq(m, profile_model(m, "s", F.samples(4)), QuantOptions())
    assert a.SerializeToString() == b.SerializeToString()


def test_per_tensor_symmetric_options():
    m = F.convnet()
    q, plan = write_qdq(
        m, profile_model(m, "s", F.samples(4)), QuantOptions(per_channel=False, symmetric=True)
    )
    inits = {t.name: numpy_helper.to_array(t) for t in q.graph.initializer}
    assert inits["w1_scale"].shape == () and inits["x_zero_point"].dtype == np.int8
    assert all(zp == 0 and signed for _, zp, signed in plan.activations.values())
    onnx.checker.check_model(q, full_check=True)


def test_keep_fp32_by_op_type_and_node_name():
    m = F.convnet()
    prof = profile_model(m, "s", F.samples(4))
    q, plan = write_qdq(m, prof, QuantOptions(keep_fp32=("Gemm",)))
    gemm = next(n for n in q.graph.node if n.op_type == "Gemm")
    assert list(gemm.input) == ["f", "w3", "b3"]  # fp32 in, fp32 weights
    assert "f" not in plan.activations
    m.graph.node[3].name = "second_conv"
    q, plan = write_qdq(m, prof, QuantOptions(keep_fp32=("second_conv",)))
    conv2 = next(n for n in q.graph.node if n.name == "second_conv")
    assert conv2.input[1] == "w2" and conv2.input[0] == "r1"
    with pytest.raises(UsageError, match="'Softmax' matches no op type"):
        write_qdq(m, prof, QuantOptions(keep_fp32=("Softmax",)))


ZERO_BRANCH = """
<ir_version: 8, opset_import: ["" : 13]>
zb (float[1, 8] x) => (float[1, 4] y) {
    z = Mul (x, zero)
    r = Relu (z)
    s = Sqrt (x)
    a = MatMul (r, w)
    b = MatMul (s, w)
    y = Add (a, b)
}
"""


def test_all_zero_and_nonfinite_tensors_are_named_and_kept_fp32():
    rng = np.random.default_rng(0)
    m = F.model(ZERO_BRANCH, {"zero": np.zeros(1), "w": rng.normal(0, 1, (8, 4))})
    cal = F.samples(4, shape=(1, 8))  # Sqrt of negatives: NaN
    prof = profile_model(m, "s", cal)
    q, plan = write_qdq(m, prof, QuantOptions())
    kept = dict(plan.kept)
    assert "all zeros" in kept["r"] and "NaN" in kept["s"]
    assert any("'r'" in w and "kept fp32" in w for w in plan.warnings)
    assert any("'s'" in w and "NaN/infinite" in w for w in plan.warnings)
    for t in q.graph.initializer:
        if t.name.endswith("_scale"):
            assert np.all(numpy_helper.to_array(t) != 0)
    onnx.checker.check_model(q, full_check=True)


def test_tensor_errors_name_the_worst_tensor_first():
    m = F.convnet()
    tiny = F.samples(8, scale=1e-3)  # calibrated on inputs 1000x smaller than it will see
    q, _ = write_qdq(m, profile_model(m, "s", tiny), QuantOptions(method="minmax"))
    errs = tensor_errors(m, q, F.samples(4, seed=3).samples)
    assert [e.sqnr_db for e in errs] == sorted(e.sqnr_db for e in errs)
    assert errs[0].sqnr_db < 10.0
    good, _ = write_qdq(m, profile_model(m, "s", F.samples(8)), QuantOptions(method="minmax"))
    good_errs = tensor_errors(m, good, F.samples(4, seed=3).samples)
    out_bad = next(e for e in errs if e.output).sqnr_db
    out_good = next(e for e in good_errs if e.output).sqnr_db
    assert out_good > 25.0 and out_bad < out_good - 15.0
    assert {e.node for e in errs} >= {"input"}


TWO_READERS = """
<ir_version: 8, opset_import: ["" : 13]>
tr (float[1, 3, 8, 8] x) => (float[1, 8, 8, 8] y) {
    c1 = Conv <pads = [1, 1, 1, 1]> (x, w1, b1)
    n1 = BatchNormalization (c1, gamma, beta, mean, var)
    y = Add (n1, c1)
}
"""


def test_a_batchnorm_is_folded_only_when_it_alone_reads_the_conv():
    w = {
        k: v
        for k, v in F.convnet_weights().items()
        if k in ("w1", "b1", "gamma", "beta", "mean", "var")
    }
    m = F.model(TWO_READERS, w)
    q, _ = write_qdq(m, profile_model(m, "s", F.samples(4)), QuantOptions())
    assert "BatchNormalization" in {n.op_type for n in q.graph.node}  # c1 has two readers
    feeds = F.samples(2, seed=5).samples
    assert outputs_sqnr([_ort(m, f) for f in feeds], [_ort(q, f) for f in feeds]) > 25.0
