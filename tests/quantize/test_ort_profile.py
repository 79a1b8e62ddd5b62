"""The profile's samples through onnxruntime, and the reference interpreter where it cannot."""

from __future__ import annotations

import numpy as np
import onnx
import pytest

import guard.quantize.profile as profile_mod
from guard.quantize.ort_profile import ort_runner
from guard.quantize.profile import profile_model
from guard.quantize.qdq import QuantOptions, write_qdq

from . import _fixtures as F


def _reference_only(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(profile_mod, "ort_runner", lambda *a: None)


def test_onnxruntime_profiles_the_same_tensors_as_the_reference(monkeypatch):
    m, cal = F.convnet(), F.samples(4)
    fast = profile_model(m, "src", cal)
    _reference_only(monkeypatch)
    ref = profile_model(m, "src", cal)
    assert set(fast.tensors) == set(ref.tensors) and fast.ops == ref.ops
    for t, s in ref.tensors.items():
        f = fast.tensors[t]
        assert f.count == s.count and f.nonfinite == s.nonfinite
        scale = max(abs(s.lo), abs(s.hi), 1e-6)
        assert abs(f.lo - s.lo) <= 1e-5 * scale and abs(f.hi - s.hi) <= 1e-5 * scale, t
        # the histograms differ by at most the values that sit on a bin edge
        assert np.abs(f.hist - s.hist).sum() <= 2e-3 * s.count, t
    # the QDQ models the two write agree in every scale to float rounding
    qa, _ = write_qdq(m, fast, QuantOptions())
    qb, _ = write_qdq(m, ref, QuantOptions())
    sa = {i.name: onnx.numpy_helper.to_array(i) for i in qa.graph.initializer}
    sb = {i.name: onnx.numpy_helper.to_array(i) for i in qb.graph.initializer}
    assert sa.keys() == sb.keys()
    for k in sa:
        if k.endswith("_scale"):
            np.testing.assert_allclose(sa[k], sb[k], rtol=1e-3, err_msg=k)


def test_onnxruntime_is_the_runner_when_it_loads_the_model(monkeypatch):
    used: list[str] = []
    real = profile_mod.ort_runner

    def spy(*a):
        r = real(*a)
        used.append("ort" if r is not None else "none")
        return r

    monkeypatch.setattr(profile_mod, "ort_runner", spy)
    monkeypatch.setattr(profile_mod, "run_reference", lambda *a: pytest.fail("reference ran"))
    m = F.convnet()
    before = m.SerializeToString()
    profile_model(m, "src", F.samples(2))
    assert used == ["ort"]
    assert m.SerializeToString() == before  # the extra outputs were the session's only


def test_a_model_onnxruntime_refuses_is_profiled_on_the_reference(monkeypatch):
    m, cal = F.convnet(), F.samples(3)
    _reference_only(monkeypatch)
    ref = profile_model(m, "src", cal)
    monkeypatch.undo()

    def refusing(*a):
        def run(feeds):
            raise RuntimeError("onnxruntime: kernel not implemented")

        return run

    monkeypatch.setattr(profile_mod, "ort_runner", refusing)
    got = profile_model(m, "src", cal)
    assert got.sha256 == ref.sha256  # the reference interpreter's profile, bit for bit


def test_ort_runner_is_none_for_a_model_onnxruntime_cannot_load():
    x = onnx.helper.make_tensor_value_info("x", onnx.TensorProto.FLOAT, [1, 4])
    y = onnx.helper.make_tensor_value_info("y", onnx.TensorProto.FLOAT, [1, 4])
    node = onnx.helper.make_node("NoSuchOp", ["x"], ["y"], domain="guard.test")
    g = onnx.helper.make_graph([node], "g", [x], [y])
    m = onnx.helper.make_model(
        g,
        opset_imports=[onnx.helper.make_opsetid("", 17), onnx.helper.make_opsetid("guard.test", 1)],
    )
    assert ort_runner(m, ["y"], {"y": np.dtype(np.float32)}) is None
