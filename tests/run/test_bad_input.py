"""Bad input: one clear line naming the file/key/node, exit 2, nothing half-written."""

from __future__ import annotations

import json
import socket
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper
from run_helpers import FAST_MEASURE, small_convnet, write_suite

from guard.cli.main import main


def suite_for(tmp_path: Path, source: str, inputs: str = "", extra: str = "") -> Path:
    return write_suite(
        tmp_path,
        f"""
    schema_version: 1
    suite: bad
    defaults:
      backends: [onnxruntime]
      measure: {FAST_MEASURE}
    models:
      - name: m
        source: {source}
        {inputs}
    {extra}""",
    )


def run_expect(args: list[str], code: int, capsys) -> str:
    got = main(args)
    err = capsys.readouterr().err
    assert got == code, err
    assert "Traceback" not in err
    return err


def error_lines(err: str) -> list[str]:
    return [line for line in err.splitlines() if line.startswith("guard: error:")]


def assert_nothing_written(tmp_path: Path, workdir: Path) -> None:
    assert not (tmp_path / "r.json").exists()
    arts = workdir / ".guard" / "artefacts"
    leftovers = [p for p in arts.rglob("*") if p.name.startswith(".")] if arts.exists() else []
    assert leftovers == []
    assert not (tmp_path / "goldens" / "bad" / "m").exists()


def test_truncated_model(tmp_path, workdir, capsys):
    good = small_convnet(tmp_path / "good.onnx")
    bad = tmp_path / "trunc.onnx"
    bad.write_bytes(good.read_bytes()[: good.stat().st_size // 2])
    err = run_expect(
        [
            "run",
            str(suite_for(tmp_path, str(bad))),
            "--no-track",
            "--json",
            str(tmp_path / "r.json"),
        ],
        2,
        capsys,
    )
    (line,) = error_lines(err)
    assert "trunc.onnx" in line and "not a valid ONNX model" in line
    doc = json.loads((tmp_path / "r.json").read_text())
    assert doc["results"][0]["verdict"] == "error" and doc["exit_code"] == 2


def test_not_onnx(tmp_path, workdir, capsys):
    bad = tmp_path / "notes.onnx"
    bad.write_text("this is a text file, not a protobuf\n" * 10)
    err = run_expect(["run", str(suite_for(tmp_path, str(bad))), "--no-track"], 2, capsys)
    (line,) = error_lines(err)
    assert "notes.onnx" in line


def test_external_data_escaping_the_model_dir(tmp_path, workdir, capsys):
    m = onnx.load(small_convnet(tmp_path / "ext.onnx"))
    w = next(t for t in m.graph.initializer if t.name == "w")
    w.ClearField("raw_data")
    w.ClearField("float_data")
    w.data_location = onnx.TensorProto.EXTERNAL
    for k, v in (("location", "../../etc/passwd"), ("offset", "0"), ("length", "864")):
        e = w.external_data.add()
        e.key, e.value = k, v
    path = tmp_path / "models" / "ext.onnx"
    path.parent.mkdir()
    path.write_bytes(m.SerializeToString())
    err = run_expect(["run", str(suite_for(tmp_path, str(path))), "--no-track"], 2, capsys)
    (line,) = error_lines(err)
    assert "ext.onnx" in line and "'w'" in line and "outside the model's directory" in line


def test_cycle_names_a_node(tmp_path, workdir, capsys):
    nodes = [
        helper.make_node("Relu", ["x2"], ["a"], name="first"),
        helper.make_node("Add", ["a", "x"], ["x2"], name="second"),
    ]
    g = helper.make_graph(
        nodes,
        "cyc",
        [helper.make_tensor_value_info("x", 1, [2])],
        [helper.make_tensor_value_info("a", 1, [2])],
    )
    path = tmp_path / "cycle.onnx"
    onnx.save(helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)]), path)
    err = run_expect(["run", str(suite_for(tmp_path, str(path))), "--no-track"], 2, capsys)
    (line,) = error_lines(err)
    assert "cycle" in line and ("'first'" in line or "'second'" in line)


def test_operator_no_backend_supports(tmp_path, workdir, capsys):
    nodes = [helper.make_node("FancyOp", ["x"], ["y"], name="fancy", domain="com.example")]
    g = helper.make_graph(
        nodes,
        "u",
        [helper.make_tensor_value_info("x", 1, [2])],
        [helper.make_tensor_value_info("y", 1, [2])],
    )
    path = tmp_path / "custom.onnx"
    m = helper.make_model(
        g, opset_imports=[helper.make_opsetid("", 17), helper.make_opsetid("com.example", 1)]
    )
    onnx.save(m, path)
    err = run_expect(["run", str(suite_for(tmp_path, str(path))), "--no-track"], 2, capsys)
    (line,) = error_lines(err)
    assert "FancyOp" in line or "com.example" in line


def test_input_too_large_to_allocate(tmp_path, workdir, capsys):
    path = small_convnet(tmp_path / "dyn.onnx", batch="N")
    s = suite_for(tmp_path, str(path), "inputs: {x: {shape: [100000, 3, 16, 16]}}")
    p2 = small_convnet(tmp_path / "dyn2.onnx", batch="N")
    s.write_text(s.read_text().replace(str(path), str(p2)).replace("100000", "10000000"))
    err = run_expect(["run", str(s), "--no-track"], 2, capsys)
    (line,) = error_lines(err)
    assert "input 'x'" in line and "GiB" in line and "limit" in line


def test_unbound_dynamic_dim(tmp_path, workdir, capsys):
    path = small_convnet(tmp_path / "dyn.onnx", batch="N")
    err = run_expect(["run", str(suite_for(tmp_path, str(path))), "--no-track"], 2, capsys)
    (line,) = error_lines(err)
    assert "input 'x' dim 0 ('N') is dynamic and unbound" in line
    assert "models[0]" in line and "shape: [1, 3, 16, 16]" in line


def test_unknown_suite_key(tmp_path, workdir, capsys):
    s = suite_for(tmp_path, "zoo:mlp", "thread: 2")
    err = run_expect(["run", str(s), "--no-track"], 2, capsys)
    (line,) = err.strip().splitlines()
    assert str(s) in line and "models[0].thread: unknown key. Did you mean 'threads'?" in line


def test_unknown_input_name_suggests(tmp_path, workdir, capsys):
    path = small_convnet(tmp_path / "net.onnx")
    s = suite_for(tmp_path, str(path), "inputs: {X: {shape: [1, 3, 16, 16]}}")
    err = run_expect(["run", str(s), "--no-track"], 2, capsys)
    (line,) = error_lines(err)
    assert "no input named 'X'" in line and "Did you mean 'x'?" in line


def test_hostile_output_path(tmp_path, workdir, capsys):
    path = small_convnet(tmp_path / "net.onnx")
    s = suite_for(tmp_path, str(path))
    err = run_expect(["run", str(s), "--no-track", "--json", "/nonexistent/dir/r.json"], 2, capsys)
    assert "/nonexistent/dir" in err and len(err.strip().splitlines()) == 1


def test_missing_model_file(tmp_path, workdir, capsys):
    err = run_expect(
        ["run", str(suite_for(tmp_path, "nope/missing.onnx")), "--no-track"], 2, capsys
    )
    (line,) = error_lines(err)
    assert "missing.onnx" in line and "not found" in line


def _closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.mark.slow
def test_unreachable_tracking_server_keeps_results(tmp_path, workdir, capsys):
    path = small_convnet(tmp_path / "net.onnx")
    uri = f"http://127.0.0.1:{_closed_port()}"
    suite = str(suite_for(tmp_path, str(path)))
    code = main(["run", suite, "--tracking-uri", uri, "--json", str(tmp_path / "r.json")])
    err = capsys.readouterr().err
    # Every check passed and the results are kept: a warning, exit 0 (README exit codes).
    assert code == 0 and "Traceback" not in err
    assert uri in err and "guard track push" in err
    kept = list((workdir / ".guard" / "pending").glob("*.json"))
    assert len(kept) == 1
    assert main(["run", suite, "--tracking-uri", uri, "--require-tracking"]) == 2
    assert len(list((workdir / ".guard" / "pending").glob("*.json"))) == 2
    doc = json.loads(kept[0].read_text())
    assert doc["results"][0]["verdict"] == "pass" and doc["results"][0]["latency_ms"]["n"] >= 5
    assert json.loads((tmp_path / "r.json").read_text())["tracking"]["kept"] == str(kept[0])


def test_bad_suite_leaves_nothing(tmp_path, workdir, capsys):
    s = suite_for(tmp_path, "zoo:mlp", "", "bogus: 1")
    run_expect(["run", str(s), "--no-track", "--json", str(tmp_path / "r.json")], 2, capsys)
    assert_nothing_written(tmp_path, workdir)


@pytest.mark.slow
def test_integer_and_scalar_inputs(tmp_path, workdir):
    """Integer inputs from 'uniform' draw integers; scalar inputs bind with shape []."""
    emb = numpy_helper.from_array(np.arange(40, dtype=np.float32).reshape(10, 4), "emb")
    nodes = [
        helper.make_node("Gather", ["emb", "ids"], ["g"], name="gather"),
        helper.make_node("Mul", ["g", "scale"], ["y"], name="mul"),
    ]
    g = helper.make_graph(
        nodes,
        "ints",
        [
            helper.make_tensor_value_info("ids", TensorProto.INT64, [1, "T"]),
            helper.make_tensor_value_info("scale", TensorProto.FLOAT, []),
        ],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, "T", 4])],
        [emb],
    )
    path = tmp_path / "ints.onnx"
    onnx.save(helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)]), path)
    s = suite_for(
        tmp_path,
        str(path),
        "inputs: {ids: {shape: [1, 6], dist: uniform, low: 0, "
        "high: 9, seed: 4}, scale: {shape: [], dist: const, value: 2}}",
    )
    assert main(["run", str(s), "--no-track", "--json", str(tmp_path / "r.json")]) == 0
    gold = np.load(tmp_path / "goldens" / "bad" / "m" / "inputs.npz")
    ids, scale = gold["a0"], gold["a1"]
    assert ids.dtype == np.int64 and ids.shape == (1, 6) and ids.min() >= 0 and ids.max() <= 9
    assert scale.shape == () and float(scale) == 2.0


@pytest.mark.slow
def test_kept_results_push_later(tmp_path, workdir, capsys):
    """What an unreachable server kept is sent later with the printed command."""
    import mlflow

    path = small_convnet(tmp_path / "net.onnx")
    uri = f"http://127.0.0.1:{_closed_port()}"
    assert main(["run", str(suite_for(tmp_path, str(path))), "--tracking-uri", uri]) == 0
    (kept,) = (workdir / ".guard" / "pending").glob("*.json")
    capsys.readouterr()
    store = f"sqlite:///{tmp_path / 'later.db'}"
    assert main(["track", "push", str(kept), "--tracking-uri", store]) == 0
    assert "pushed" in capsys.readouterr().out
    assert main(["track", "push", str(kept), "--tracking-uri", store]) == 0
    assert "nothing sent" in capsys.readouterr().out
    mlflow.set_tracking_uri(store)
    runs = mlflow.search_runs(experiment_names=["guard/bad"], output_format="list")
    assert len(runs) == 2  # one parent, one child


def test_selection_that_matches_nothing(tmp_path, workdir, capsys):
    path = small_convnet(tmp_path / "net.onnx")
    s = suite_for(tmp_path, str(path))
    err = run_expect(["run", str(s), "--no-track", "--backend", "tvm"], 2, capsys)
    assert "nothing to run" in err
    err = run_expect(["run", str(s), "--no-track", "--model", "nope"], 2, capsys)
    assert "--model 'nope'" in err


def test_tune_needs_a_tvm_model(tmp_path, workdir, capsys):
    s = suite_for(tmp_path, "zoo:mlp")
    err = run_expect(["tune", str(s), "--db", str(tmp_path / "db")], 2, capsys)
    assert "lists the tvm backend" in err and not (tmp_path / "db").exists()
    err = run_expect(["tune", str(s), "--db", str(tmp_path / "db"), "--trials", "0"], 2, capsys)
    assert "--trials must be >= 1" in err
