"""The tvm backend: build, load, run against onnxruntime; errors; tuning-cache hits and misses."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from guard.backends.base import BuildRequest
from guard.core.errors import UnsupportedOpError
from guard.manifest.target_string import canonicalize

RTOL, ATOL = 1e-4, 1e-5


def _save(graph, path: Path, opset: int = 17) -> Path:
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])
    model.ir_version = 8
    onnx.checker.check_model(model)
    onnx.save(model, str(path))
    return path


def _mlp(path: Path) -> Path:
    """x[1,16] -> Gemm(16->32) -> Relu -> Gemm(32->8): built with onnx.helper."""
    rng = np.random.default_rng(1)
    w0 = rng.standard_normal((32, 16)).astype(np.float32)
    b0 = rng.standard_normal(32).astype(np.float32)
    w1 = rng.standard_normal((8, 32)).astype(np.float32)
    b1 = rng.standard_normal(8).astype(np.float32)
    g = helper.make_graph(
        [
            helper.make_node("Gemm", ["x", "w0", "b0"], ["h"], transB=1, name="fc0"),
            helper.make_node("Relu", ["h"], ["r"], name="relu0"),
            helper.make_node("Gemm", ["r", "w1", "b1"], ["y"], transB=1, name="fc1"),
        ],
        "mlp_small",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", 16])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["N", 8])],
        [
            numpy_helper.from_array(a, n)
            for a, n in ((w0, "w0"), (b0, "b0"), (w1, "w1"), (b1, "b1"))
        ],
    )
    return _save(g, path)


def _gemm(path: Path) -> Path:
    """One Gemm: one MetaSchedule task, so tuning it takes seconds."""
    rng = np.random.default_rng(2)
    w = rng.standard_normal((32, 16)).astype(np.float32)
    b = rng.standard_normal(32).astype(np.float32)
    g = helper.make_graph(
        [helper.make_node("Gemm", ["x", "w", "b"], ["y"], transB=1, name="fc")],
        "gemm",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 16])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 32])],
        [numpy_helper.from_array(w, "w"), numpy_helper.from_array(b, "b")],
    )
    return _save(g, path)


def _ort(path: Path, feeds: dict[str, np.ndarray]) -> list[np.ndarray]:
    import onnxruntime as ort

    return ort.InferenceSession(str(path), providers=["CPUExecutionProvider"]).run(None, feeds)


def _build(backend, model: Path, shapes, out: Path, target: str, cache: Path | None = None):
    out.mkdir(parents=True, exist_ok=True)
    req = BuildRequest(
        model_path=model,
        input_shapes=shapes,
        target_raw="host",
        target_canonical=target,
        threads=1,
        out_dir=out,
        tuning_cache=cache,
    )
    return backend.build(req)


@pytest.fixture(scope="module")
def backend():
    from guard.backends.tvm import TvmBackend

    return TvmBackend()


@pytest.fixture(scope="module")
def host() -> str:
    return canonicalize("host")


def test_import_does_not_import_tvm():
    code = (
        "import sys, guard, guard.backends, guard.backends.tvm, guard.backends.tvm_tuning; "
        "b = guard.backends.get_backend('tvm'); "
        "assert b.name == 'tvm'; "
        "print(sorted(m for m in sys.modules if m == 'tvm' or m.startswith('tvm.')))"
    )
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == "[]"


def test_thread_pool_resizes_both_ways_and_leaves_affinity_alone():
    """The pool starts with every core, is sized per session, and cannot grow past that."""
    code = (
        "import os, warnings; from guard.backends.tvm import _set_threads; "
        "from guard.backends.tvm_import import host_cores; a = os.sched_getaffinity(0); "
        "h = host_cores(); got = [_set_threads(n)['runtime_num_threads'] for n in (1, h, 1)]; "
        "w = warnings.catch_warnings(record=True); ws = w.__enter__(); "
        "warnings.simplefilter('always'); big = _set_threads(h + 1)['runtime_num_threads']; "
        "print(got == [1, h, 1], big == h, len(ws), os.sched_getaffinity(0) == a)"
    )
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == "True True 1 True"


def test_versions_pin_tvm_and_llvm(backend):
    import tvm

    compiler, runtime = backend.versions()
    assert compiler["name"] == runtime["name"] == "apache-tvm"
    assert compiler["version"] == runtime["version"] == tvm.__version__ == "0.27.0.post1"
    assert isinstance(compiler["llvm_version_major"], int) and compiler["llvm_version_major"] >= 10


def test_small_mlp_matches_onnxruntime(backend, host, tmp_path):
    model = _mlp(tmp_path / "mlp.onnx")
    info = _build(backend, model, {"x": (1, 16)}, tmp_path / "art", host)
    assert info.payload == "model.so" and (tmp_path / "art" / "model.so").is_file()
    assert info.tuning == {}  # no cache: the pipeline records explicit nulls
    assert info.session_options["threads"] == info.session_options["runtime_num_threads"] == 1
    sess = backend.load(tmp_path / "art", 1)
    assert sess.input_names == ["x"] and sess.output_names == ["y"]
    x = np.random.default_rng(0).standard_normal((1, 16)).astype(np.float32)
    got = sess.run({"x": x})
    want = _ort(model, {"x": x})
    assert len(got) == 1 and got[0].shape == (1, 8)
    np.testing.assert_allclose(got[0], want[0], rtol=RTOL, atol=ATOL)
    p = sess.partitions()
    assert (p.count, p.delegated_nodes, p.fallback_nodes) == (1, 3, 0)
    m = sess.memory()
    # Planned intermediates: h and r (1x32 fp32 each) at most; y is an output.
    assert m.arena_bytes is not None and 0 < m.arena_bytes <= 2 * 32 * 4
    assert m.lower_bound_bytes == 32 * 4 * 2  # h and r live at relu0; then r and y (160 B)
    assert m.extra["output_bytes"] == 8 * 4
    assert "StaticPlanBlockMemory" in m.how


def test_two_inputs_int64_and_two_outputs_keep_graph_order(backend, host, tmp_path):
    table = np.arange(24, dtype=np.float32).reshape(6, 4)
    g = helper.make_graph(
        [
            helper.make_node("Neg", ["x"], ["first"]),
            helper.make_node("Gather", ["table", "idx"], ["second"], axis=0),
        ],
        "io",
        [
            helper.make_tensor_value_info("idx", TensorProto.INT64, [3]),
            helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 5]),
        ],
        [
            helper.make_tensor_value_info("first", TensorProto.FLOAT, [2, 5]),
            helper.make_tensor_value_info("second", TensorProto.FLOAT, [3, 4]),
        ],
        [numpy_helper.from_array(table, "table")],
    )
    model = _save(g, tmp_path / "io.onnx")
    _build(backend, model, {"idx": (3,), "x": (2, 5)}, tmp_path / "art", host)
    sess = backend.load(tmp_path / "art", 1)
    assert sess.input_names == ["idx", "x"] and sess.output_names == ["first", "second"]
    feeds = {
        "x": np.random.default_rng(5).standard_normal((2, 5)).astype(np.float32),
        "idx": np.array([5, 0, 2], dtype=np.int64),
    }
    got, want = sess.run(feeds), _ort(model, feeds)
    assert [a.shape for a in got] == [(2, 5), (3, 4)]
    for a, b in zip(got, want, strict=True):
        np.testing.assert_allclose(a, b, rtol=RTOL, atol=ATOL)


def test_bound_run_computes_what_run_does_on_inputs_set_once(backend, host, tmp_path):
    # The call a counted run counts (guard.counting.child): inputs set once, outputs
    # kept in the VM; the same numbers as run() on the same feeds, also after a run() of
    # other feeds in between (the bound inputs are the VM's own copies).
    model = _mlp(tmp_path / "mlp.onnx")
    _build(backend, model, {"x": (1, 16)}, tmp_path / "art", host)
    sess = backend.load(tmp_path / "art", 1)
    x = np.random.default_rng(0).standard_normal((1, 16)).astype(np.float32)
    call = sess.bound_run({"x": x})
    sess.run({"x": -x})
    call()
    (out,) = [sess._vm.get_outputs("main")]
    np.testing.assert_array_equal(out.numpy(), sess.run({"x": x})[0])


@pytest.mark.slow
def test_zoo_mlp_matches_onnxruntime(backend, host, tmp_path):
    from guard.zoo import model_path

    model = model_path("mlp")
    _build(backend, model, {"x": (1, 256)}, tmp_path / "art", host)
    sess = backend.load(tmp_path / "art", 1)
    x = np.random.default_rng(3).standard_normal((1, 256)).astype(np.float32)
    np.testing.assert_allclose(
        sess.run({"x": x})[0], _ort(model, {"x": x})[0], rtol=RTOL, atol=ATOL
    )
    meta = json.loads((tmp_path / "art" / "tvm.json").read_text())
    assert meta["schema_version"] == 1 and meta["target_canonical"] == host


def test_unsupported_op_is_one_line_and_names_op_and_file(backend, host, tmp_path):
    g = helper.make_graph(
        [helper.make_node("Relu", ["x"], ["r"]), helper.make_node("DFT", ["r"], ["y"])],
        "dft",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 8, 1])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 8, 2])],
    )
    model = _save(g, tmp_path / "dft.onnx")
    with pytest.raises(UnsupportedOpError) as exc:
        _build(backend, model, {"x": (1, 8, 1)}, tmp_path / "art", host)
    text = str(exc.value)
    assert "DFT" in text and str(model) in text and "\n" not in text
    assert exc.value.__cause__ is None and exc.value.__suppress_context__


def test_unknown_option_is_refused(backend, host, tmp_path):
    from guard.core.errors import ModelError

    model = _mlp(tmp_path / "mlp.onnx")
    (tmp_path / "art").mkdir()
    req = BuildRequest(
        model_path=model,
        input_shapes={"x": (1, 16)},
        target_raw="host",
        target_canonical=host,
        threads=1,
        out_dir=tmp_path / "art",
        options={"opt_level": 2},
    )
    with pytest.raises(ModelError, match="opt_level"):
        backend.build(req)


# -- tuning cache ------------------------------------------------------------------------------


def _other_mcpu(host: str) -> str:
    """The host target with another -mcpu: the same code, a different cache key."""
    assert "-mcpu=" in host
    cpu = "x86-64-v2" if "x86_64" in host else "cortex-a53"
    other = " ".join(f"-mcpu={cpu}" if w.startswith("-mcpu=") else w for w in host.split())
    assert other != host
    return other


@pytest.fixture(scope="module")
def tuned(tmp_path_factory, host):
    """A real MetaSchedule JSON database for the one-Gemm model, tuned for the host target."""
    from guard.backends.tvm import tune

    d = tmp_path_factory.mktemp("tvm_tune")
    model = _gemm(d / "gemm.onnx")
    db = d / "db"
    summary = tune(model, {"x": (1, 16)}, host, db, max_trials_global=2, num_trials_per_iter=2)
    assert summary["tasks_without_valid_record"] == [], summary  # every trial failed
    return model, db, summary


@pytest.mark.slow
def test_tuning_cache_hit_for_the_tuned_target(backend, host, tuned, tmp_path):
    model, db, summary = tuned
    assert summary["tasks"] == ["fused_matmul_add"] and summary["records"] >= 1
    info = _build(backend, model, {"x": (1, 16)}, tmp_path / "art", host, cache=db)
    t = info.tuning
    assert (t["hits"], t["misses"], t["missed"], t["applied"]) == (1, 0, [], 1)
    assert t["entries"] == summary["records"] and t["path"] == str(db)
    assert t["failed_records"] == summary["failed_records"] < t["entries"]
    assert len(t["sha256"]) == 64
    # The tuned schedule computes the same thing.
    x = np.random.default_rng(4).standard_normal((1, 16)).astype(np.float32)
    got = backend.load(tmp_path / "art", 1).run({"x": x})
    np.testing.assert_allclose(got[0], _ort(model, {"x": x})[0], rtol=RTOL, atol=ATOL)


@pytest.mark.slow
def test_tuning_cache_misses_for_another_mcpu(backend, host, tuned, tmp_path):
    model, db, _ = tuned
    other = _other_mcpu(host)
    with pytest.warns(UserWarning, match="1 of 1 tasks missed"):
        info = _build(backend, model, {"x": (1, 16)}, tmp_path / "art", other, cache=db)
    t = info.tuning
    assert t["hits"] == 0 and t["misses"] == 1 and t["missed"] == ["fused_matmul_add"]
    assert t["misses_tuned_for_other_target"] == 1 and t["applied"] == 0


@pytest.mark.slow
def test_tvm_own_lookup_ignores_the_target(host, tuned):
    """Why guard matches targets itself: TVM's query returns the record for any target."""
    import tvm
    from tvm.s_tir import meta_schedule as ms

    from guard.backends import tvm_tuning
    from guard.backends.tvm_import import import_onnx, tvm_target

    model, db, _ = tuned
    other = tvm_target(_other_mcpu(host))
    mod = import_onnx(model, {"x": (1, 16)})
    (task,) = tvm_tuning.extract_tasks(tvm_tuning.prepare(mod, other), other)
    database = ms.database.JSONDatabase(
        path_workload=str(db / "database_workload.json"),
        path_tuning_record=str(db / "database_tuning_record.json"),
        allow_missing=False,
    )
    rec = database.query_tuning_record(task.dispatched[0], other, task.task_name)
    assert rec is not None and str(rec.target) != str(other)
    assert rec.target.export()["mcpu"] != other.export()["mcpu"]
    assert isinstance(tvm.__version__, str)


@pytest.mark.slow
def test_failed_trials_are_misses_not_hits(backend, host, tuned, tmp_path):
    """MetaSchedule stores failed trials (run_secs 1e10); a cache of only those covers nothing."""
    model, db, _ = tuned
    bad = tmp_path / "db"
    bad.mkdir()
    (bad / "database_workload.json").write_bytes((db / "database_workload.json").read_bytes())
    lines = []
    for line in (db / "database_tuning_record.json").read_text().splitlines():
        rec = json.loads(line)
        rec[1][1] = [1e10]  # [workload index, [trace, run_secs, target, args_info]]
        lines.append(json.dumps(rec))
    (bad / "database_tuning_record.json").write_text("\n".join(lines) + "\n")
    with pytest.warns(UserWarning, match="1 of 1 tasks missed"):
        info = _build(backend, model, {"x": (1, 16)}, tmp_path / "art", host, cache=bad)
    t = info.tuning
    assert (t["hits"], t["misses"], t["applied"]) == (0, 1, 0)
    assert t["misses_failed_trials_only"] == 1 and t["failed_records"] == t["entries"]
    from guard.backends.tvm_tuning import db_sha256

    assert t["sha256"] == db_sha256(bad) != db_sha256(db)  # the hash covers the records
