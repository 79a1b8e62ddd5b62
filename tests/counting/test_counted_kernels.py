"""Per-kernel counts of a bundled artefact: each kernel function's instructions (its
callees included) from its symbol's address range, summing to the inference's count; a
kernel made heavier is the first the doctor's step 10 names."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from guard.cli.main import main
from guard.doctor.facts import Side
from guard.doctor.finding import CAUSE
from guard.doctor.steps_kernels import step10_kernels
from guard.results.result import Result

pytestmark = pytest.mark.skipif(
    any(shutil.which(t) is None for t in ("qemu-x86_64", "cc")),
    reason="counting needs qemu-user and gcc (apt-get install -y qemu-user gcc)",
)
SUITE = """schema_version: 1
suite: kernels
defaults:
  threads: 1
  measure: {warmup_s: 0.01, min_iters: 3, min_time_s: 0.01, max_time_s: 0.5, rounds: 1,
            counted: {inferences: 2, warmup: 1, engine: emulator}}
models:
  - name: two
    source: two.onnx
    inputs:
      x: {shape: [16, 128], dist: normal, seed: 0}
    backends: [bundled]
    target: host
"""


def two_matmuls(path: Path, side_width: int) -> None:
    """y = x @ w (128 -> 128) and z = relu(x) @ v (128 -> side_width): the side MatMul is
    the kernel made heavier by a wider v."""
    rng = np.random.default_rng(0)
    w = numpy_helper.from_array(rng.standard_normal((128, 128)).astype(np.float32), "w")
    v = numpy_helper.from_array(rng.standard_normal((128, side_width)).astype(np.float32), "v")
    nodes = [
        helper.make_node("MatMul", ["x", "w"], ["y"], name="mm_y"),
        helper.make_node("Relu", ["x"], ["r"], name="relu"),
        helper.make_node("MatMul", ["r", "v"], ["z"], name="mm_z"),
    ]
    g = helper.make_graph(
        nodes, "two", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [16, 128])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [16, 128]),
         helper.make_tensor_value_info("z", TensorProto.FLOAT, [16, side_width])], [w, v],
    )  # fmt: skip
    onnx.save(helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)]), path)


def _counted(tmp: Path, side_width: int, name: str) -> dict:
    d = tmp / name
    d.mkdir()
    (d / "suite.yaml").write_text(SUITE)
    two_matmuls(d / "two.onnx", side_width)
    out = d / "out.json"
    assert main(["run", str(d / "suite.yaml"), "--counted", "--no-track", "--json", str(out)]) in (
        0,
        1,
    )
    (r,) = json.loads(out.read_text())["results"]
    return r


@pytest.mark.slow
def test_kernel_counts_sum_to_the_inference_and_the_heavier_kernel_is_named(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
):
    monkeypatch.chdir(tmp_path)
    base = _counted(tmp_path, 16, "base")
    c = base["counted"]
    kernels = c["kernels"]
    assert {k["op"] for k in kernels.values()} >= {"MatMul", "Relu", "entry"}, kernels
    total = sum(k["instructions"] for k in kernels.values())
    # Everything but the runner's few instructions before the entry is in some range.
    assert 0 <= c["instructions"] - total <= 0.001 * c["instructions"], (total, c)
    nodes = {n for k in kernels.values() for n in k["nodes"]}
    assert {"mm_y", "relu", "mm_z"} <= nodes, kernels

    head = _counted(tmp_path, 64, "head")
    sides = (Side("base", Result.from_json(base)), Side("head", Result.from_json(head)))
    f = step10_kernels(*sides, None)  # type: ignore[arg-type]
    d = f.to_dict()
    assert d["status"] == CAUSE and "mm_z" in d["summary"], d
    first = next(e for e in d["evidence"] if e["fact"].endswith("counted instructions"))
    assert "mm_z" in first["fact"], d["evidence"]
