"""`guard quantize`: calibration formats, bad input (one line, exit 2), profile reuse."""

from __future__ import annotations

import json

import numpy as np
import onnx
import pytest
from onnx import numpy_helper

from guard.cli.main import main
from guard.compiler.frontend.prepare import GraphInput
from guard.core.errors import ModelError, UsageError
from guard.quantize.build import check_samples
from guard.quantize.calibration import data_sha256, read_calibration

from . import _fixtures as F

X = GraphInput("x", np.dtype(np.float32), (1, 3, 8, 8))
XDYN = GraphInput("x", np.dtype(np.float32), ("N", 3, 8, 8))


def _arr(n: int, seed: int = 0) -> np.ndarray:
    return np.random.default_rng(seed).standard_normal((n, 3, 8, 8)).astype(np.float32)


def test_every_format_gives_the_same_samples_and_hash(tmp_path):
    a = _arr(6)
    np.savez(tmp_path / "c.npz", x=a)  # rank + 1: one sample per index
    npz = read_calibration(tmp_path / "c.npz", [X])
    (tmp_path / "npy").mkdir()
    for i in range(3):
        np.save(tmp_path / "npy" / f"{i}.npy", a[2 * i : 2 * i + 2])  # rank: batch-1 samples
    npy = read_calibration(tmp_path / "npy", [XDYN])
    (tmp_path / "sets").mkdir()
    for i in range(6):
        d = tmp_path / "sets" / f"test_data_set_{i}"
        d.mkdir()
        (d / "input_0.pb").write_bytes(
            numpy_helper.from_array(a[i : i + 1], "x").SerializeToString()
        )
    sets = read_calibration(tmp_path / "sets", [X])
    assert len(npz.samples) == len(npy.samples) == len(sets.samples) == 6
    assert npz.samples[0]["x"].shape == (1, 3, 8, 8)
    assert npz.sha256 == npy.sha256 == sets.sha256 == data_sha256(npz.samples)
    assert read_calibration(tmp_path / "sets" / "test_data_set_2", [X]).samples[0][
        "x"
    ].tobytes() == (a[2:3].tobytes())


def test_mismatched_data_names_the_file_the_input_and_both_shapes(tmp_path):
    np.savez(tmp_path / "c.npz", x=np.zeros((4, 3, 9, 9), np.float32))
    with pytest.raises(ModelError) as e:
        read_calibration(tmp_path / "c.npz", [X])
    msg = str(e.value)
    assert "c.npz" in msg and "'x'" in msg and "[4, 3, 9, 9]" in msg and "[1, 3, 8, 8]" in msg
    np.savez(tmp_path / "d.npz", x=np.zeros((4, 3, 8, 8), np.float64))
    with pytest.raises(ModelError, match="'x' is float64, the model's input 'x' is float32"):
        read_calibration(tmp_path / "d.npz", [X])
    np.savez(tmp_path / "e.npz", image=_arr(2))
    with pytest.raises(ModelError, match="'image' is not an input of the model"):
        read_calibration(tmp_path / "e.npz", [X])


def test_too_few_samples_warn_or_refuse():
    assert check_samples("minmax", 1, "c.npz") is None
    w = check_samples("percentile", 3, "c.npz")
    assert w and "at least 8" in w and "holds 3" in w
    with pytest.raises(
        UsageError, match="entropy calibration wants at least 8 samples; c.npz holds 1"
    ):
        check_samples("entropy", 1, "c.npz")


@pytest.fixture
def model_and_data(tmp_path):
    path = F.save(F.convnet(), tmp_path)
    np.savez(tmp_path / "cal.npz", x=_arr(12))
    return path, tmp_path / "cal.npz"


def test_command_writes_a_checked_model_and_reports(model_and_data, tmp_path, capsys):
    path, cal = model_and_data
    out, prof, js = tmp_path / "q.onnx", tmp_path / "p.json", tmp_path / "q.json"
    argv = ["quantize", str(path), "--calibration", str(cal), "--out", str(out),
            "--profile", str(prof), "--json", str(js)]  # fmt: skip
    assert main(argv) == 0
    text = capsys.readouterr().out
    onnx.checker.check_model(onnx.load(str(out)), full_check=True)
    doc = json.loads(js.read_text())
    assert doc["profile_sha256"] in text and doc["calibration_sha256"] in text
    assert doc["worst_tensors"] and doc["worst_tensors"][0]["tensor"] in text
    assert "worst tensors" in text
    meta = {p.key: p.value for p in onnx.load(str(out)).metadata_props}
    assert meta["guard.quantize.profile_sha256"] == doc["profile_sha256"]
    # the second run reuses the profile; other data re-makes it, and says so
    assert main(argv) == 0
    assert "profile reused" in capsys.readouterr().out
    np.savez(cal, x=_arr(12, seed=5))
    assert main(argv) == 0
    assert "calibration data changed" in capsys.readouterr().out
    assert json.loads(js.read_text())["profile_sha256"] != doc["profile_sha256"]


def test_command_bad_input_is_one_line_and_exit_2(model_and_data, tmp_path, capsys):
    path, cal = model_and_data
    out = str(tmp_path / "q.onnx")
    np.savez(tmp_path / "bad.npz", x=np.zeros((2, 3, 4, 4), np.float32))
    assert (
        main(["quantize", str(path), "--calibration", str(tmp_path / "bad.npz"), "--out", out]) == 2
    )
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "bad.npz" in err and "[2, 3, 4, 4]" in err
    # an already quantised model
    assert main(["quantize", str(path), "--calibration", str(cal), "--out", out]) == 0
    capsys.readouterr()
    assert main(["quantize", out, "--calibration", str(cal), "--out", out + ".2"]) == 2
    assert "already quantised" in capsys.readouterr().err
    # a profile of another model: refused, naming both hashes
    prof = tmp_path / "p.json"
    assert (
        main(
            ["quantize", str(path), "--calibration", str(cal), "--out", out, "--profile", str(prof)]
        )
        == 0
    )
    other = F.model(F.CONVNET, F.convnet_weights(seed=9))
    other_path = F.save(other, tmp_path, "other.onnx")
    capsys.readouterr()
    code = main(
        [
            "quantize",
            str(other_path),
            "--calibration",
            str(cal),
            "--out",
            out,
            "--profile",
            str(prof),
        ]
    )
    err = capsys.readouterr().err
    from guard.core.fsutil import file_sha256

    assert code == 2 and file_sha256(path) in err and file_sha256(other_path) in err
    # entropy with one sample
    np.savez(tmp_path / "one.npz", x=_arr(1))
    assert main(["quantize", str(path), "--calibration", str(tmp_path / "one.npz"), "--out", out,
                 "--method", "entropy"]) == 2  # fmt: skip
    assert "holds 1" in capsys.readouterr().err
