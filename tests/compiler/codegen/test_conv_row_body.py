"""The row tasks of a float convolution share one body over run-time rows.

A convolution whose channel blocks do not divide into its tasks is cut into bands of
output rows (guard.compiler.codegen.split); each task's kernel calls one body per
geometry and schedule with its rows (conv/emitter.py ``_row_body``) instead of carrying
its own copy of the loop nest. Strips of tile_strips that run such a convolution share
it the same way. The shared body must compute what the whole, specialised kernel does:
the split and tiled build equals the unsplit, untiled one bit for bit on the host's
class and on x86-64-v3, at 1 and 2 threads.
"""

from __future__ import annotations

import re

import numpy as np
import pytest

from guard.compiler import import_onnx, optimize, run_reference
from guard.compiler.codegen import split
from guard.compiler.codegen.build import host_target, jit
from guard.compiler.codegen.kernel_plan import Step
from guard.compiler.partition.plan import plan
from guard.compiler.passes.tile_strips import TileStrips, regions

from .._helpers import apply, feeds_for
from ._jit import skip_unless_runnable
from .test_threads import _net

BODY = re.compile(r'define internal (?:fastcc )?void @"?(guard\.conv\.rows\.[^"( ]+)"?\(')


@pytest.mark.parametrize("isa", ["host", "avx2"])  # avx2: x86-64-v3
def test_row_tasks_share_one_body_and_equal_the_whole_kernel(isa, monkeypatch):
    target = host_target() if isa == "host" else skip_unless_runnable(isa)
    g = import_onnx(_net(32, 24), None)  # blocked layouts; the stem's output in NCHW
    opt, _ = optimize(g, "O2", target=target.table)
    feeds = feeds_for(opt)
    want = jit(plan(opt), target, threads=1)[0].run(feeds)["y"]  # no task, no strip
    np.testing.assert_allclose(want, run_reference(g, feeds)["y"], rtol=1e-4, atol=1e-4)
    monkeypatch.setattr(split, "MIN_TASK_FLOPS", 1)  # every convolution split
    tiled, res = apply(TileStrips(exit=regions(opt)[-1].exit, strips=2), opt)
    assert res.changed
    for graph in (opt, tiled):
        rt1, code = jit(plan(graph), target, threads=1)
        rt2, _ = jit(plan(graph), target, threads=2, code=code)
        banded = [s for s in code.plan.steps() if s.parts and "rows" in s.parts[0].attrs]
        tasks = [t for s in banded for t in s.parts]
        kernels = {t.kernel for t in tasks}  # a task kernel per distinct rows and shapes
        # one body per geometry: every task of a step, and the steps of one geometry
        bodies = BODY.findall(code.generated.ir_text)
        assert len(set(bodies)) == len(bodies) <= len(banded) < len(kernels)
        assert len(bodies) == len({_geometry(s) for s in banded})
        for rt in (rt1, rt2):
            np.testing.assert_array_equal(rt.run(feeds)["y"], want)


def _geometry(step: Step) -> tuple[object, ...]:
    """What a row task's body specialises on besides its rows."""
    attrs = {k: repr(v) for k, v in step.attrs.items() if k != "rows"}
    shapes = tuple(None if o is None else o.shape for o in (*step.inputs, *step.outputs))
    return step.op, tuple(sorted(attrs.items())), shapes
