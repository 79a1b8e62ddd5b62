"""Step 11: what to file, and the ``guard reduce`` command that makes its smallest graph."""

from __future__ import annotations

from guard.doctor.facts import Context, Side
from guard.doctor.finding import CAUSE, NA, OK, SUSPECT, Finding


def step11_reduce(base: Side | None, head: Side, ctx: Context, earlier: list[Finding]) -> Finding:
    f = Finding(11, "file it, with the smallest graph")
    # A measurement problem (step 1) is fixed by measuring again, not by a reproducer.
    bad = [x for x in earlier if x.status in (CAUSE, SUSPECT) and x.step != 1]
    numerics = head.check_status("tolerance") == "fail"
    if not bad and not numerics:
        f.status = NA
        f.summary = "nothing to file: " + (
            "fix the measurement first (step 1)"
            if earlier[0].status in (CAUSE, SUSPECT)
            else "no step found a cause"
        )
        return f
    model = head.r.model
    suite = ctx.suite_path or "SUITE.yaml"
    src = ctx.model_source(head)
    first = next((x for x in bad if x.status == CAUSE), bad[0] if bad else None)
    split = head.check_status("partitions") == "fail" or (
        first is not None and first.step in (2, 3) and first.status == CAUSE
    )
    if numerics:
        mode = "--accuracy"
    elif split:
        mode = "--partitions"
    else:
        mode = "--latency BASE.yaml (a suite variant built the base's way)"
    f.status = OK
    f.summary = "make a reproducer: " + (
        f"step {first.step} ({first.title}) "
        f"{'found the cause' if first.status == CAUSE else 'is suspect'}"
        if first
        else "the outputs are outside tolerance"
    )
    f.action = (
        "guard reduce " + (f"{src} " if src else "") + f"--suite {suite} --model {model} "
        f"--backend {head.r.backend} {mode}; attach the bundle it writes "
        "(reduced .onnx, inputs, one-model suite, summary)."
    )
    return f
