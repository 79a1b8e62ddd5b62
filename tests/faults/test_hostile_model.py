"""Models at the edges of the format: -1 dims are dynamic, undefined dtypes are refused."""

from __future__ import annotations

import json
from pathlib import Path

import onnx
import pytest
from onnx import TensorProto, helper
from run_helpers import FAST_MEASURE, small_convnet, write_suite

from guard.cli.main import main
from guard.core.errors import ModelError
from guard.suite import InputSpec
from guard.suite.model import bind, load_model


def _suite(tmp_path: Path, model: Path, inputs: str, backends: str = "[onnxruntime]") -> Path:
    return write_suite(
        tmp_path,
        f"""
    schema_version: 1
    suite: edge
    defaults:
      backends: {backends}
      measure: {FAST_MEASURE}
    models:
      - name: m
        source: {model}
        {inputs}
    """,
    )


@pytest.mark.slow
def test_negative_dim_is_dynamic_and_bound_from_the_suite(tmp_path, workdir, capsys, monkeypatch):
    # A common converter writes the batch dim as dim_value: -1; onnxruntime runs it.
    monkeypatch.setenv("GUARD_CACHE", str(tmp_path / "cache"))  # the note is new here
    model = small_convnet(tmp_path / "neg.onnx", batch=-1)
    assert onnx.load(model).graph.input[0].type.tensor_type.shape.dim[0].dim_value == -1
    suite = _suite(
        tmp_path, model, "inputs: {x: {shape: [1, 3, 16, 16]}}", "[onnxruntime, bundled]"
    )
    code = main(["run", str(suite), "--no-track", "--json", str(tmp_path / "r.json")])
    err = capsys.readouterr().err
    assert code == 0, err
    notes = [line for line in err.splitlines() if line.startswith("guard: note:")]
    assert (
        len(notes) == 1 and "'x'" in notes[0] and "dim 0" in notes[0] and "bound to 1" in notes[0]
    )
    doc = json.loads((tmp_path / "r.json").read_text())
    assert [r["verdict"] for r in doc["results"]] == ["pass", "pass"]


def test_the_negative_dim_note_is_shown_once_not_on_every_command(tmp_path, monkeypatch, capsys):
    """Issue 28 item 8: the note repeated on every command that bound the model."""
    import guard.core.user_cache as uc

    monkeypatch.setenv("GUARD_CACHE", str(tmp_path / "cache"))
    model = small_convnet(tmp_path / "neg.onnx", batch=-1)
    spec = {"x": InputSpec("x", (1, 3, 16, 16))}

    def notes_of_one_command() -> list[str]:
        monkeypatch.setattr(uc, "_shown", set())  # a new guard process
        bind(load_model(model), model, spec, "s.yaml: models[0] (m)")
        bind(load_model(model), model, spec, "s.yaml: models[0] (m)")  # bound twice in it
        return [ln for ln in capsys.readouterr().err.splitlines() if "guard: note:" in ln]

    (first,) = notes_of_one_command()
    assert "declares dim 0 as a negative dim_value" in first and "(shown once)" in first
    assert notes_of_one_command() == []  # the next command stays quiet
    other = small_convnet(tmp_path / "neg2.onnx", batch=-1, opset=13)  # another model
    monkeypatch.setattr(uc, "_shown", set())
    bind(load_model(other), other, spec, "s.yaml: models[1] (n)")
    assert "negative dim_value" in capsys.readouterr().err


def test_unbound_negative_dim_says_how_to_bind_it(tmp_path):
    model = small_convnet(tmp_path / "neg.onnx", batch=-1)
    with pytest.raises(ModelError) as info:
        bind(load_model(model), model, {}, "s.yaml: models[0] (m)")
    msg = str(info.value)
    assert "dim 0 (declared negative: dynamic) is dynamic and unbound" in msg
    assert "shape: [1, 3, 16, 16]" in msg


def test_negative_dim_bound_wrongly_by_rank_is_still_refused(tmp_path):
    model = small_convnet(tmp_path / "neg.onnx", batch=-1)
    with pytest.raises(ModelError, match="rank 2 given"):
        bind(load_model(model), model, {"x": InputSpec("x", (1, 3))}, "w")


def _identity(path: Path, elem_type: int) -> Path:
    x = helper.make_tensor_value_info("x", elem_type, [1, 4])
    y = helper.make_tensor_value_info("y", elem_type, [1, 4])
    g = helper.make_graph([helper.make_node("Identity", ["x"], ["y"])], "g", [x], [y])
    onnx.save(helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)]), path)
    return path


@pytest.mark.parametrize(
    ("elem", "name"),
    [
        (TensorProto.UNDEFINED, "UNDEFINED"),
        (TensorProto.STRING, "STRING"),
        (TensorProto.COMPLEX64, "COMPLEX64"),
    ],
)
def test_input_dtype_guard_cannot_feed_is_exit_2(tmp_path, workdir, capsys, elem, name):
    model = _identity(tmp_path / "id.onnx", elem)
    suite = _suite(tmp_path, model, "")
    assert main(["run", str(suite), "--no-track"]) == 2
    err = capsys.readouterr().err
    assert f"has element type {name}" in err and "models[0] (m)" in err
    assert "Traceback" not in err and "internal error" not in err


def test_model_path_that_is_a_device_or_fifo(tmp_path, workdir, capsys):
    import os

    fifo = tmp_path / "pipe.onnx"
    os.mkfifo(fifo)
    for src in (fifo, Path("/dev/zero")):
        suite = _suite(tmp_path, src, "")
        assert main(["run", str(suite), "--no-track"]) == 2
        err = capsys.readouterr().err
        assert "not a regular file" in err and "Traceback" not in err


def test_onnxruntime_run_time_failure_is_a_model_error(tmp_path):
    from guard.backends.base import BuildRequest
    from guard.backends.onnxruntime import OnnxRuntimeBackend, _ort_text

    model = small_convnet(tmp_path / "m.onnx")
    out = tmp_path / "art"
    out.mkdir()
    be = OnnxRuntimeBackend()
    be.build(
        BuildRequest(
            model_path=model,
            input_shapes={"x": (1, 3, 16, 16)},
            target_raw="host",
            target_canonical="host",
            threads=1,
            out_dir=out,
        )
    )
    sess = be.load(out, 1)
    import numpy as np

    with pytest.raises(ModelError, match="onnxruntime failed running the model") as info:
        sess.run({"x": np.zeros((1, 5, 16, 16), np.float32)})  # wrong channel count
    assert str(out / "model.opt.onnx") in str(info.value)
    # An ORT message with invalid UTF-8 (pybind11 raises UnicodeDecodeError) is still a line.
    bad = UnicodeDecodeError("utf-8", b"Node (\xff\xfe) failed", 6, 7, "invalid start byte")
    assert _ort_text(bad) == "Node (\ufffd\ufffd) failed"


@pytest.mark.parametrize(
    "inputs", ["{dist: const, value: 1000}", "{dist: uniform, low: 0, high: 100000}"]
)
def test_input_values_outside_the_dtype_are_exit_2_not_wrapped(tmp_path, workdir, capsys, inputs):
    # numpy would wrap 1000 to -24 in int8 and the run would measure wrong data.
    model = _identity(tmp_path / "id8.onnx", TensorProto.INT8)
    suite = _suite(tmp_path, model, f"inputs: {{x: {inputs}}}")
    assert main(["run", str(suite), "--no-track"]) == 2
    err = capsys.readouterr().err
    assert "outside int8's range [-128, 127]" in err and "inputs.x" in err
    assert "Traceback" not in err
