"""Files that are not what they claim: FIFOs, directories, truncated or short external data,
empty inputs, a golden whose golden.json was deleted. Each is exit 2 naming the file and its
kind or size, at once (a FIFO never blocks a read)."""

from __future__ import annotations

import copy
import os
import shutil
import subprocess
from pathlib import Path

import numpy as np
import onnx
import pytest
from faults_helpers import guard_subprocess
from onnx import TensorProto, helper, numpy_helper
from run_helpers import FAST_MEASURE, small_convnet, write_suite

from guard.cli.main import main
from guard.core.errors import ModelError
from guard.core.fsutil import BoundedReadError, read_bounded, regular_file_size
from guard.golden.store import GoldenCorruptError, GoldenStore
from guard.suite import InputSpec
from guard.suite.model import bind, load_model


def _matmul() -> onnx.ModelProto:
    w = numpy_helper.from_array(np.ones((64, 64), np.float32), "w")
    g = helper.make_graph(
        [helper.make_node("MatMul", ["x", "w"], ["y"], name="mm")],
        "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["n", 64])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["n", 64])],
        [w],
    )
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])


def _external(d: Path) -> Path:
    d.mkdir(parents=True, exist_ok=True)
    onnx.save(
        copy.deepcopy(_matmul()),
        d / "m.onnx",
        save_as_external_data=True,
        all_tensors_to_one_file=True,
        location="m.data",
        size_threshold=0,
    )
    return d / "m.onnx"


def _suite(tmp_path: Path, model: Path, inputs: str = "{x: {shape: [1, 64]}}") -> Path:
    return write_suite(
        tmp_path,
        f"""
    schema_version: 1
    suite: files
    defaults:
      backends: [onnxruntime]
      measure: {FAST_MEASURE}
    models:
      - name: m
        source: {model}
        inputs: {inputs}
    """,
    )


def test_the_regular_file_check_names_each_kind(tmp_path):
    os.mkfifo(tmp_path / "fifo")
    (tmp_path / "dir").mkdir()
    (tmp_path / "file").write_bytes(b"abc")
    assert regular_file_size(tmp_path / "file") == 3
    for name, kind in [("fifo", "a FIFO"), ("dir", "a directory"), ("/dev/null", "device")]:
        with pytest.raises(BoundedReadError, match=kind):
            regular_file_size(tmp_path / name)
    with pytest.raises(BoundedReadError, match="a FIFO"):
        read_bounded(tmp_path / "fifo")
    with pytest.raises(BoundedReadError, match="a character device"):
        read_bounded("/dev/zero")


def test_a_truncated_external_data_file_is_bad_input(tmp_path):
    model = _external(tmp_path / "t")
    os.truncate(tmp_path / "t" / "m.data", 1000)
    with pytest.raises(ModelError) as info:
        load_model(model)
    msg = str(info.value)
    assert "'w'" in msg and "bytes 0..16384" in msg and "has 1000 bytes" in msg, msg


def test_an_external_data_length_past_the_end_is_bad_input(tmp_path):
    model = _external(tmp_path / "p")
    proto = onnx.load(model, load_external_data=False)
    for e in proto.graph.initializer[0].external_data:
        if e.key == "length":
            e.value = str(10**9)
    model.write_bytes(proto.SerializeToString())
    with pytest.raises(ModelError, match=r"needs bytes 0\.\.1000000000 .* has 16384 bytes"):
        load_model(model)


@pytest.mark.parametrize("kind", ["fifo", "dir"])
def test_external_data_that_is_not_a_file_is_named_by_its_kind(tmp_path, kind):
    model = _external(tmp_path / kind)
    data = tmp_path / kind / "m.data"
    data.unlink()
    os.mkfifo(data) if kind == "fifo" else data.mkdir()
    with pytest.raises(ModelError) as info:
        load_model(model)
    msg = str(info.value)
    assert "does not exist" not in msg
    assert ("a FIFO" if kind == "fifo" else "a directory") in msg, msg


def test_a_fifo_as_the_model_is_refused_at_once(tmp_path):
    os.mkfifo(tmp_path / "m.onnx")
    with pytest.raises(ModelError, match="is a FIFO"):
        load_model(tmp_path / "m.onnx")


def test_an_input_with_a_zero_dim_is_bad_input(tmp_path, workdir, capsys):
    model = tmp_path / "m.onnx"
    onnx.save(_matmul(), model)
    with pytest.raises(ModelError, match=r"input 'x' with shape \[0, 64\] is empty \(dim 0"):
        bind(load_model(model), model, {"x": InputSpec("x", (0, 64))}, "s.yaml: models[0]")
    code = main(["run", str(_suite(tmp_path, model, "{x: {shape: [0, 64]}}")), "--no-track"])
    assert code == 2, capsys.readouterr().err


def _golden(tmp_path: Path, workdir: Path) -> tuple[Path, Path]:
    model = small_convnet(tmp_path / "c.onnx")
    suite = write_suite(
        tmp_path,
        f"""
    schema_version: 1
    suite: files
    defaults:
      backends: [onnxruntime]
      measure: {FAST_MEASURE}
    models:
      - name: m
        source: {model}
        inputs: {{x: {{shape: [1, 3, 16, 16]}}}}
    """,
    )
    assert main(["golden", "update", str(suite), "--model", "m", "--reason", "seed"]) == 0
    return suite, tmp_path / "goldens" / "files" / "m"


@pytest.mark.slow
def test_a_golden_array_file_that_is_a_fifo_does_not_hang(tmp_path, workdir):
    suite, gdir = _golden(tmp_path, workdir)
    (gdir / "outputs.npz").unlink()
    os.mkfifo(gdir / "outputs.npz")
    proc = guard_subprocess(["run", str(suite), "--no-track"], cwd=workdir)
    try:
        out, err = proc.communicate(timeout=120)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, 9)
        proc.communicate()
        pytest.fail("guard run blocked on a FIFO golden")
    assert proc.returncode == 2, err
    assert "outputs.npz" in err and "a FIFO" in err and "Traceback" not in err


def test_a_deleted_golden_json_is_not_silently_recreated(tmp_path, workdir, capsys):
    suite, gdir = _golden(tmp_path, workdir)
    before = (gdir / "outputs.npz").read_bytes()
    (gdir / "golden.json").unlink()
    capsys.readouterr()
    assert main(["run", str(suite), "--no-track"]) == 2
    err = capsys.readouterr().err
    assert "golden.json is missing" in err and "guard golden update" in err, err
    assert not (gdir / "golden.json").exists()
    assert (gdir / "outputs.npz").read_bytes() == before
    # the hint's way out: an update with a reason re-creates it
    assert main(["golden", "update", str(suite), "--model", "m", "--reason", "restore"]) == 0
    assert GoldenStore(gdir.parent).load("m") is not None


def test_a_golden_array_over_the_byte_limit_is_refused_before_it_is_loaded(tmp_path, workdir):
    _, gdir = _golden(tmp_path, workdir)
    with pytest.raises(GoldenCorruptError, match="limit of 100 bytes"):
        GoldenStore(gdir.parent).load("m", max_bytes=100)
    shutil.rmtree(gdir)
    assert GoldenStore(gdir.parent).load("m") is None


@pytest.mark.parametrize("suffix", [".npy", ".npz", ".pb"])
def test_an_input_data_file_that_is_a_fifo_is_refused_at_once(tmp_path, suffix):
    from guard.suite.data import load_array

    os.mkfifo(tmp_path / f"x{suffix}")
    with pytest.raises(ModelError, match="a FIFO"):
        load_array(tmp_path / f"x{suffix}", None, "x")
