"""Silero VAD (silero_vad.onnx, the sample rate an input) at its natural window sizes: 512
samples at 16 kHz, 256 at 8 kHz. At 512 the 8 kHz branch cannot run (onnxruntime fails
inside it too), so the bundled compiler specialises the sample-rate If: the 16 kHz model
compiled whole, the host dispatching on ``sr == 16000``. Equal to onnxruntime with the
state carried from call to call, through the compiler API and through ``guard run``.
Skipped, saying why, where the silero-vad wheel is not installed (.ci/run installs it
without its torch dependency: only its model files are read)."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from guard.compiler import import_onnx, optimize, run_reference
from guard.compiler.codegen.build import jit
from guard.compiler.partition.plan import plan
from guard.core.errors import ModelError

from .test_real_models import model_path

# (window samples, sample rate): the sizes the model's own wrapper feeds
NATURAL = [(512, 16000), (256, 8000)]
STATE = (2, 1, 128)


@pytest.mark.slow  # two builds of the model, ~10 s
@pytest.mark.parametrize(("n", "sr"), NATURAL, ids=["16k-512", "8k-256"])
def test_silero_runs_native_at_its_natural_sizes_equal_to_onnxruntime(n: int, sr: int) -> None:
    import onnxruntime as ort

    path = model_path("silero_vad", "data/silero_vad.onnx")
    g0 = import_onnx(path, {"input": (1, n), "state": STATE})
    g, _ = optimize(g0, "O2")
    compiled = plan(g)
    (cf,) = compiled.partition_report["control_flow"]
    for sub in cf["subgraphs"].values():  # every specialisation or branch: one native partition
        assert (sub["count"], sub["fallback_nodes"]) == (1, 0), compiled.partition_text()
    if n == 512:  # the 8 kHz branch is refused at 512: the 16 kHz model alone, behind a guard
        assert cf["specialised"]["branches"] == {
            "then_branch": "compiled",
            "else_branch": "refused",
        }
        assert "LSTM input X is f32[1,1,1,128,2]" in cf["specialised"]["refused"]["else_branch"]
    else:  # at 256 both branches type alike: the host If of today, not specialised
        assert "specialised" not in cf
    rt, _ = jit(compiled)
    sess = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    rng = np.random.default_rng(0)
    state = np.zeros(STATE, np.float32)
    for _ in range(4):  # a stream: the state carried from call to call
        feeds = {"input": rng.uniform(-1, 1, (1, n)).astype(np.float32), "state": state,
                 "sr": np.array(sr, np.int64)}  # fmt: skip
        want = sess.run(None, feeds)
        got = rt.run(feeds)
        ref = run_reference(g0, feeds)
        for k, w in zip(g.outputs, want, strict=True):
            np.testing.assert_allclose(got[k], w, rtol=1e-3, atol=1e-4)
            np.testing.assert_allclose(ref[k], w, rtol=1e-3, atol=1e-4)
        state = got["stateN"]
    if n == 512:  # the refused branch fails when taken, as onnxruntime's does
        with pytest.raises(ModelError, match="else_branch cannot run at the input shapes"):
            rt.run({**feeds, "sr": np.array(8000, np.int64)})


SUITE = """schema_version: 1
suite: silero
defaults:
  backends: [onnxruntime, bundled]
  threads: 1
  measure: {{warmup_s: 0.05, min_iters: 5, min_time_s: 0.05, max_time_s: 2}}
  checks:
    tolerance: {{rtol: 1.0e-3, atol: 1.0e-4}}
models:
  - name: silero-16k
    source: {path}
    inputs:
      input: {{shape: [1, 512], dist: uniform, low: -1, high: 1, seed: 0}}
      state: {{shape: [2, 1, 128], dist: zeros}}
      sr: {{shape: [], dist: const, value: 16000}}
  - name: silero-8k
    source: {path}
    inputs:
      input: {{shape: [1, 256], dist: uniform, low: -1, high: 1, seed: 1}}
      state: {{shape: [2, 1, 128], dist: uniform, low: -0.5, high: 0.5, seed: 2}}
      sr: {{shape: [], dist: const, value: 8000}}
"""


@pytest.mark.slow  # guard run: two models on two backends, ~30 s
def test_guard_run_passes_silero_at_both_sample_rates(tmp_path: Path, monkeypatch) -> None:
    from guard.cli.main import main

    path = model_path("silero_vad", "data/silero_vad.onnx")
    monkeypatch.chdir(tmp_path)
    suite = tmp_path / "silero.yaml"
    suite.write_text(SUITE.format(path=json.dumps(str(path))))
    out = tmp_path / "results.json"
    code = main(["run", str(suite), "--no-track", "--golden-dir", str(tmp_path / "goldens"),
                 "--json", str(out)])  # fmt: skip
    results = json.loads(out.read_text())["results"]
    rows = {(r["model"], r["backend"]): r for r in results}
    assert code == 0, [(k, r["verdict"], r["checks"]) for k, r in rows.items()]
    assert set(rows) == {(m, b) for m in ("silero-16k", "silero-8k")
                         for b in ("onnxruntime", "bundled")}  # fmt: skip
    for (model, backend), r in rows.items():
        assert r["verdict"] == "pass", r["checks"]
        # The golden is the reference interpreter's (created on this run): both backends
        # within the bound of it, so within twice the bound of each other.
        assert r["numerics"]["max_abs_err"] <= 1e-4, (model, backend, r["numerics"])
    assert rows[("silero-16k", "bundled")]["partitions"]["fallback_nodes"] == 1  # the If
