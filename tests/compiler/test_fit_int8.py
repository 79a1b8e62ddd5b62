"""The ladder's int8 rung (guard.compiler.fit.int8) with the quantise hook
(guard.quantize.fit_hook): its arena is the int8 build's, accounted as the reference
interpreter's tensors; its error against fp32 is stated, not held to the fp32 tolerance;
the calibration option and flag and their bad input."""

from __future__ import annotations

import json
import os
import re
from pathlib import Path

import numpy as np
import onnx
import onnx.parser
import pytest
from onnx import numpy_helper

from guard.checks.evaluate import arena_check
from guard.compiler import import_onnx, optimize, run_reference
from guard.compiler.fit.ladder import climb
from guard.compiler.fit.measure import measure, seeded_feeds
from guard.compiler.partition.plan import plan
from guard.quantize.fit_hook import SEEDED, quantise_hook
from guard.results.result import MemoryBudget

# x -> Conv(4->16, 3x3) -> Relu -> Conv(16->16, 3x3) -> Relu -> GAP -> Flatten -> Gemm -> y
NET = """
<ir_version: 8, opset_import: ["" : 13]>
net (float[1, 4, 32, 32] x) => (float[1, 10] y) {
    c1 = Conv <pads = [1, 1, 1, 1]> (x, w1, b1)
    r1 = Relu (c1)
    c2 = Conv <pads = [1, 1, 1, 1]> (r1, w2, b2)
    r2 = Relu (c2)
    p = GlobalAveragePool (r2)
    f = Flatten (p)
    y = Gemm <transB = 1> (f, w3, b3)
}
"""


@pytest.fixture(autouse=True)
def _cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("GUARD_CACHE", str(tmp_path / "cache"))


@pytest.fixture(scope="module")
def net(tmp_path_factory: pytest.TempPathFactory) -> Path:
    rng = np.random.default_rng(0)
    weights = {
        "w1": rng.normal(0, 0.3, (16, 4, 3, 3)), "b1": rng.normal(0, 0.1, 16),
        "w2": rng.normal(0, 0.2, (16, 16, 3, 3)), "b2": rng.normal(0, 0.1, 16),
        "w3": rng.normal(0, 0.5, (10, 16)), "b3": rng.normal(0, 0.1, 10),
    }  # fmt: skip
    m = onnx.parser.parse_model(NET)
    m.graph.initializer.extend(
        numpy_helper.from_array(np.asarray(v, np.float32), k) for k, v in weights.items()
    )
    path = tmp_path_factory.mktemp("net") / "net.onnx"
    onnx.save(m, str(path))
    return path


@pytest.fixture(scope="module")
def fp32(net: Path):
    return optimize(import_onnx(net, None), "O2")[0]


def test_int8_rung_is_the_int8_builds_arena_in_the_reference_interpreters_bytes(net, fp32):
    hook = quantise_hook(net, {})
    q = hook()
    (profile,) = (Path(os.environ["GUARD_CACHE"]) / "int8" / "profiles").glob("*.json")
    profile.write_text("{")  # damaged: made again, not an error
    assert hook().calibration == q.calibration and json.loads(profile.read_text())
    assert q.calibration == (
        f"calibrated on {SEEDED} seeded inputs; pass --calibration for real ranges"
    )
    ladder = climb(fp32, 1024, quantise=hook)
    int8 = next(s for s in ladder.steps if s.name == "int8")
    assert int8.quantised and int8.plan is not None
    assert int8.what.startswith(q.calibration)
    # the int8 build's stages are tiled where that lowers the arena (here nothing does: x
    # is the peak); tests/compiler/test_tile_strips_int8.py has one that is tiled
    assert re.search(
        r"not tiled: (\d+ tilings tried, none lowered the arena|no row-local first stage "
        r"or head ends in a tensor under 1/8 of the arena|no tiling lowered the arena \(one "
        r"region, or two together\)); arena",
        int8.what,
    )
    p = int8.plan
    assert int8.arena_bytes == p.arena_bytes == plan(q.graph).arena_bytes  # nothing to reorder
    # Every arena tensor the plan counts holds exactly the bytes the reference interpreter
    # produces for it: the 8-bit tensors are really 8-bit.
    g = p.graph.clone()
    g.outputs = list(dict.fromkeys([*p.memory.slots, *g.outputs]))
    values = run_reference(g, seeded_feeds(p))
    eight = 0
    for t in p.memory.slots:
        ref = values[t]
        assert ref.nbytes == p.view.tensors[t].nbytes and str(ref.dtype) == p.view.tensors[t].dtype
        eight += ref.nbytes if ref.dtype.itemsize == 1 else 0
    assert eight > 0 and f"{eight / 1024:.1f} KiB" in int8.what
    assert int8.arena_bytes < ladder.steps[0].arena_bytes  # 8-bit activations: a smaller arena


def test_fits_at_rung_5_with_the_error_stated(net, fp32):
    hook = quantise_hook(net, {})
    probe = climb(fp32, 1024, quantise=hook, stop_at_fit=False)
    int8 = next(s for s in probe.steps if s.name == "int8")
    fp32_best = min(s.arena_bytes for s in probe.steps if s.rung < 5 and s.arena_bytes)
    assert int8.arena_bytes is not None and int8.arena_bytes < fp32_best
    ladder = climb(fp32, int8.arena_bytes, quantise=hook)
    assert ladder.fits and ladder.rung == 5 and ladder.steps[-1].name == "int8"  # no spill
    measured = measure(ladder, seconds=0.2)
    step = measured.steps[-1]
    # the stated error is the int8 model's against fp32 on the reference interpreter (the
    # generated code is bit-exact to it on int8, within float rounding on fp32)
    feeds = seeded_feeds(ladder.steps[0].plan)
    ref32 = run_reference(fp32, feeds)["y"].astype(np.float64)
    ref8 = run_reference(step.plan.graph, feeds)["y"].astype(np.float64)
    want = float(np.max(np.abs(ref8 - ref32)))
    assert want > 0 and step.max_abs_err == pytest.approx(want, abs=1e-4)
    assert step.max_rel_err == pytest.approx(want / np.max(np.abs(ref32)), rel=1e-2)
    assert step.top1_agreement is not None and 0.0 <= step.top1_agreement <= 1.0
    d = measured.to_dict()
    rung = d["ladder"][-1]
    assert rung["quantised"] and rung["max_rel_err"] == step.max_rel_err
    check = arena_check(None, step.arena_bytes, None, MemoryBudget.of(d))
    assert check.status == "pass" and "fits at rung 5 (int8" in check.message
    assert "int8 outputs against fp32: max abs err" in check.message
    assert "int8 outputs against fp32" in measured.summary()


def test_fit_command_calibration_and_a_budget_below_every_rung(net, tmp_path, capsys):
    from guard.cli.main import main

    data = tmp_path / "calib.npz"
    rng = np.random.default_rng(1)
    np.savez(data, x=rng.standard_normal((3, 1, 4, 32, 32)).astype(np.float32))
    argv = ["fit", str(net), "--budget", "1KiB", "--no-latency", "--json"]
    assert main([*argv, "--calibration", str(data)]) == 1
    report = json.loads(capsys.readouterr().out)
    int8 = next(r for r in report["ladder"] if r["name"] == "int8")
    assert int8["what"].startswith("calibrated on calib.npz (3 samples)")
    reached = [r["arena_bytes"] for r in report["ladder"] if r["arena_bytes"] is not None]
    assert report["smallest_reachable_bytes"] == min(reached) > 1024
    assert main([*argv[:-1]]) == 1
    out = capsys.readouterr().out
    assert "smallest reachable arena is" in out and "seeded inputs" in out
    assert main([*argv, "--calibration", str(tmp_path / "missing.npz")]) == 2
    assert "--calibration" in capsys.readouterr().err


def test_a_hook_that_fails_leaves_rung_5_unapplied_and_the_climb_goes_on(fp32):
    from guard.core.errors import ModelError

    def refuses():
        raise ModelError("opset 9 is below 13", where="m.onnx")

    ladder = climb(fp32, 1024, quantise=refuses)
    int8 = next(s for s in ladder.steps if s.name == "int8")
    assert int8.arena_bytes is None and int8.plan is None
    assert int8.what == "not applied: quantising failed: m.onnx: opset 9 is below 13"
    assert ladder.steps[-1].name == "spill" and not ladder.fits


def test_a_quantised_model_is_counted_not_quantised_again(net, fp32):
    q = quantise_hook(net, {})()
    called = []
    ladder = climb(q.graph, 1024, quantise=lambda: called.append(1) or q)
    int8 = next(s for s in ladder.steps if s.name == "int8")
    assert not called and int8.what.startswith("already int8 between layers")
