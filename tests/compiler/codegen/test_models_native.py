"""Every zoo model (the nine light topologies with seeded weights, the transformer, MLP,
inception block, digits classifier) through generated code: one native partition, and
outputs equal to run_reference and to onnxruntime within rtol 1e-4 / atol 1e-5."""

from __future__ import annotations

import numpy as np
import onnxruntime as ort
import pytest

from guard import zoo
from guard.compiler import import_onnx, optimize, run_reference
from guard.compiler.codegen.build import jit
from guard.compiler.partition.plan import plan

RTOL, ATOL = 1e-4, 1e-5


def _close(got, want, rtol):
    err = np.abs(got.astype(np.float64) - want) / (ATOL + rtol * np.abs(want))
    return float(err.max()) if err.size else 0.0


@pytest.mark.slow
@pytest.mark.parametrize("name", zoo.list_models())
def test_zoo_model_through_generated_code(name, summary_line):
    d = zoo.describe(name)
    shapes = {k: [1 if isinstance(x, str) else x for x in v] for k, v in d["inputs"].items()}
    path = zoo.model_path(name)
    g, _ = optimize(import_onnx(path, shapes), "O2")
    compiled = plan(g)
    rep = compiled.partition_report
    assert rep["count"] == 1 and rep["fallback_nodes"] == 0, compiled.partition_text()
    rt, code = jit(compiled)
    rng = np.random.default_rng(0)
    feeds = {k: rng.standard_normal(g.values[k].shape).astype(np.float32) for k in g.inputs}
    if name == "digits":
        feeds = {k: rng.uniform(0, 16, g.values[k].shape).astype(np.float32) for k in g.inputs}
    out = rt.run(feeds)
    ref = run_reference(g, feeds)
    so = ort.SessionOptions()
    so.intra_op_num_threads = 1
    sess = ort.InferenceSession(str(path), so, providers=["CPUExecutionProvider"])
    theirs = dict(zip([o.name for o in sess.get_outputs()], sess.run(None, feeds), strict=True))
    rtol = RTOL
    worst_ref = max(_close(out[k], ref[k], rtol) for k in ref)
    worst_ort = max(_close(out[k], theirs[k], rtol) for k in ref)
    summary_line(
        f"generated code {name}: {len(code.plan.steps())} steps, {code.generated.kernels} kernels, "
        f"compiled in {code.generated.compile_s:.2f} s; error/tolerance vs reference "
        f"{worst_ref:.3f}, vs onnxruntime {worst_ort:.3f} (rtol {rtol})"
    )
    assert worst_ref <= 1.0 and worst_ort <= 1.0
