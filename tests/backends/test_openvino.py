"""The openvino backend: build, load, run against onnxruntime; the recorded configuration,
partitions from the runtime graph, memory, the model cache; exit 2 without OpenVINO."""

from __future__ import annotations

import importlib.util
import json
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from guard.backends import get_backend
from guard.backends.base import BuildRequest
from guard.core.errors import ModelError, UsageError
from guard.manifest.target_string import canonicalize
from guard.run.cache_check import hash_tree

openvino = pytest.importorskip(
    "openvino", reason="OpenVINO is not installed (pip install 'guard[openvino]')"
)
RTOL, ATOL = 1e-4, 1e-5


def _save(graph, path: Path) -> Path:
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    onnx.checker.check_model(model)
    onnx.save(model, str(path))
    return path


def _mlp(path: Path) -> Path:
    """x[N,16] -> Gemm(16->32) -> Relu -> Gemm(32->8), the batch dim dynamic."""
    rng = np.random.default_rng(1)
    inits = [
        numpy_helper.from_array(rng.standard_normal(s).astype(np.float32), n)
        for n, s in (("w0", (32, 16)), ("b0", (32,)), ("w1", (8, 32)), ("b1", (8,)))
    ]
    g = helper.make_graph(
        [
            helper.make_node("Gemm", ["x", "w0", "b0"], ["h"], transB=1, name="fc0"),
            helper.make_node("Relu", ["h"], ["r"], name="relu0"),
            helper.make_node("Gemm", ["r", "w1", "b1"], ["y"], transB=1, name="fc1"),
        ],
        "mlp",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", 16])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["N", 8])],
        inits,
    )
    return _save(g, path)


def _concat(path: Path) -> Path:
    """Two 1x1 convolutions concatenated, then a third: OpenVINO 2026.4 runs this Concat
    on its reference implementation (``ref_f32``) between optimised convolutions."""
    rng = np.random.default_rng(0)
    ws = [
        numpy_helper.from_array(rng.standard_normal(s).astype(np.float32), n)
        for n, s in (("w1", (16, 8, 1, 1)), ("w2", (16, 8, 1, 1)), ("w3", (8, 32, 1, 1)))
    ]
    g = helper.make_graph(
        [
            helper.make_node("Conv", ["x", "w1"], ["a"], name="c1"),
            helper.make_node("Conv", ["x", "w2"], ["b"], name="c2"),
            helper.make_node("Concat", ["a", "b"], ["cat"], axis=1, name="cat"),
            helper.make_node("Conv", ["cat", "w3"], ["y"], name="c3"),
        ],
        "concat",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 8, 5, 5])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 8, 5, 5])],
        ws,
    )
    return _save(g, path)


def _req(model: Path, out: Path, shapes, **options) -> BuildRequest:
    out.mkdir()
    return BuildRequest(
        model_path=model,
        input_shapes=shapes,
        target_raw="host",
        target_canonical=canonicalize("host"),
        threads=1,
        out_dir=out,
        options=options,
    )


def _ort(model: Path, feeds):
    import onnxruntime as ort

    return ort.InferenceSession(str(model), providers=["CPUExecutionProvider"]).run(None, feeds)


def test_build_records_config_and_matches_onnxruntime(tmp_path):
    model = _mlp(tmp_path / "mlp.onnx")
    be = get_backend("openvino")
    info = be.build(_req(model, tmp_path / "a", {"x": (3, 16)}))
    art = tmp_path / "a"
    assert info.payload == "model.xml" and (art / "model.bin").is_file()
    # The configuration guard compiles with, recorded as the manifest's compiler pins.
    assert info.session_options == {
        "device": "CPU",
        "INFERENCE_NUM_THREADS": "1",
        "PERFORMANCE_HINT": "LATENCY",
        "NUM_STREAMS": "1",
        "INFERENCE_PRECISION_HINT": "f32",
    }
    assert info.compiler["version"] == openvino.__version__.split("-")[0]
    props = info.compiler["compiled_properties"]
    assert props["INFERENCE_PRECISION_HINT"].find("float32") >= 0, props
    assert props["NUM_STREAMS"] == "1" and props["INFERENCE_NUM_THREADS"] == "1"
    # The model cache was written into the artefact at build time.
    assert list((art / "cache").iterdir())
    x = np.random.default_rng(2).standard_normal((3, 16)).astype(np.float32)
    sess = be.load(art, 1)
    (y,) = sess.run({"x": x})
    np.testing.assert_allclose(y, _ort(model, {"x": x})[0], rtol=RTOL, atol=ATOL)
    p = sess.partitions()
    assert p.count == 1 and p.fallback_nodes == 0 and p.delegated_nodes >= 1
    m = sess.memory()
    # No arena from OpenVINO's CPU plugin, and the result says so; the lower bound holds
    # at least the output (3 x 8 floats; OpenVINO may fuse the whole MLP into one layer).
    assert m.arena_bytes is None and "reports no memory statistic" in m.how
    assert m.lower_bound_bytes >= 3 * 8 * 4


def test_load_leaves_the_artefact_and_its_model_cache_unchanged(tmp_path):
    model = _mlp(tmp_path / "mlp.onnx")
    be = get_backend("openvino")
    be.build(_req(model, tmp_path / "a", {"x": (1, 16)}))
    before = hash_tree(tmp_path / "a")
    x = np.ones((1, 16), np.float32)
    want = be.load(tmp_path / "a", 1).run({"x": x})[0]
    np.testing.assert_allclose(be.load(tmp_path / "a", 2).run({"x": x})[0], want, rtol=RTOL)
    assert hash_tree(tmp_path / "a") == before
    # A configuration the blob was not compiled for: compiled, and whatever OpenVINO writes
    # into the model cache for it is removed (the artefact's hashes stay true).
    other = tmp_path / "b"
    shutil.copytree(tmp_path / "a", other)
    meta = json.loads((other / "openvino.json").read_text())
    meta["config"]["PERFORMANCE_HINT"] = "THROUGHPUT"
    (other / "openvino.json").write_text(json.dumps(meta))
    cached = sorted(p.name for p in (other / "cache").iterdir())
    np.testing.assert_allclose(be.load(other, 1).run({"x": x})[0], want, rtol=RTOL)
    assert sorted(p.name for p in (other / "cache").iterdir()) == cached


def test_a_concatenation_copy_is_not_a_fallback(tmp_path):
    """OpenVINO labels a Concatenation that is not in place ``ref_f32``: its only
    implementation, a copy. It counts as delegated, so a concatenating model stays one
    partition; a compute layer on a reference implementation stays a fallback node."""
    model = _concat(tmp_path / "cat.onnx")
    be = get_backend("openvino")
    be.build(_req(model, tmp_path / "a", {"x": (1, 8, 5, 5)}))
    p = be.load(tmp_path / "a", 1).partitions()
    assert (p.count, p.fallback_nodes) == (1, 0), p
    assert "Concatenation" in p.details[0]["ops"], p


def test_reference_primitives_are_fallbacks_but_copies():
    from guard.backends.openvino_graph import is_reference

    assert is_reference("ref_f32", "Interpolate") and is_reference("ref_any_i32", "Gather")
    assert not is_reference("ref_f32", "Concatenation") and not is_reference("ref", "Split")
    assert not is_reference("brgconv_avx512_f32", "Convolution")


def test_bound_run_and_kernels(tmp_path):
    model = _concat(tmp_path / "cat.onnx")
    be = get_backend("openvino")
    be.build(_req(model, tmp_path / "a", {"x": (1, 8, 5, 5)}))
    sess = be.load(tmp_path / "a", 1)
    x = np.random.default_rng(3).standard_normal((1, 8, 5, 5)).astype(np.float32)
    want = sess.run({"x": x})[0]
    call = sess.bound_run({"x": x})
    call()
    np.testing.assert_allclose(sess._request.get_output_tensor(0).data, want)
    rows = sess.kernels({"x": x}, top=3)
    assert 1 <= len(rows) <= 3 and all(r["source"] == "openvino PERF_COUNT" for r in rows)
    assert {r["op"] for r in rows} & {"Convolution", "Concatenation", "Reorder"}


def test_options_are_checked(tmp_path):
    model = _mlp(tmp_path / "mlp.onnx")
    be = get_backend("openvino")
    with pytest.raises(ModelError, match="unknown option"):
        be.build(_req(model, tmp_path / "a", {"x": (1, 16)}, threads=2))
    with pytest.raises(ModelError, match="precision"):
        be.build(_req(model, tmp_path / "b", {"x": (1, 16)}, precision="int4"))
    info = be.build(_req(model, tmp_path / "c", {"x": (1, 16)}, precision="bf16"))
    assert info.session_options["INFERENCE_PRECISION_HINT"] == "bf16"


def test_foreign_target_is_refused(tmp_path):
    model = _mlp(tmp_path / "mlp.onnx")
    raw = "llvm -mtriple=aarch64-linux-gnu -mattr=+neon"
    req = BuildRequest(**{**_req(model, tmp_path / "a", {"x": (1, 16)}).__dict__,
                          "target_raw": raw, "target_canonical": canonicalize(raw)})  # fmt: skip
    with pytest.raises(UsageError, match="runs on this host's CPU"):
        get_backend("openvino").build(req)


def test_missing_openvino_is_exit_2_with_the_install_command(tmp_path, monkeypatch):
    real = importlib.util.find_spec
    monkeypatch.setattr(
        importlib.util, "find_spec", lambda n, *a: None if n == "openvino" else real(n, *a)
    )
    with pytest.raises(UsageError, match=r"pip install 'guard\[openvino\]'") as e:
        get_backend("openvino")
    assert e.value.exit_code == 2


def test_import_does_not_import_openvino():
    code = "import guard.backends.openvino, sys; print('openvino' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"


def test_suite_run_without_openvino_exits_2_naming_the_install(tmp_path):
    """A whole ``guard run`` where OpenVINO cannot be imported: exit 2, the command named."""
    suite = tmp_path / "s.yaml"
    _mlp(tmp_path / "mlp.onnx")
    suite.write_text(
        "schema_version: 1\nsuite: ovmissing\ndefaults: {backends: [openvino], threads: 1}\n"
        "models:\n  - name: mlp\n    source: mlp.onnx\n    inputs: {x: {shape: [1, 16]}}\n"
    )
    # A sitecustomize that hides openvino from this one process tree.
    hide = tmp_path / "hide"
    hide.mkdir()
    (hide / "sitecustomize.py").write_text(
        "import importlib.util as u\n_f = u.find_spec\n"
        "u.find_spec = lambda n, *a: None if n == 'openvino' else _f(n, *a)\n"
    )
    import os

    env = {**os.environ, "PYTHONPATH": f"{hide}{os.pathsep}{os.environ.get('PYTHONPATH', '')}"}
    out = subprocess.run(
        [sys.executable, "-m", "guard.cli.main", "run", str(suite), "--no-track",
         "--json", str(tmp_path / "r.json")],
        capture_output=True, text=True, cwd=tmp_path, env=env,
    )  # fmt: skip
    assert out.returncode == 2, out.stdout + out.stderr
    assert "pip install 'guard[openvino]'" in out.stdout + out.stderr
    doc = json.loads((tmp_path / "r.json").read_text())
    assert doc["results"][0]["verdict"] == "error"
