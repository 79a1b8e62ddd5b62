"""Step 12, for an int8 row only (a result with a ``quantization`` block): which tensor lost it.

The block (guard.run.int8) carries the int8 model's per-tensor SQNR against its fp32
source, worst first (onnxruntime's qdq_loss_debug measure, guard.quantize.sqnr), beside the
output SQNR and top-1 agreement this backend got. When the ``quantization`` check failed,
the worst tensor is the cause: the first place the int8 model's values left the fp32
model's. A calibration set or profile that changed since the base is named too: a
different calibration set is the usual reason a tensor's range no longer fits.
"""

from __future__ import annotations

from typing import Any

from guard.doctor.facts import Context, Side
from guard.doctor.finding import CAUSE, OK, SUSPECT, Finding
from guard.results.result import Quantization

STEP = 12
TITLE = "which tensor lost it"


def applies(head: Side) -> bool:
    return head.r.quantization is not None


def _shown(q: Quantization | None) -> tuple[tuple[str, Any], ...]:
    """The block's figures and pins the step shows, in order (None without a block)."""
    return (
        ("sqnr_db", q.sqnr_db if q else None),
        ("top1_agreement", q.top1_agreement if q else None),
        ("top1_drop", q.top1_drop if q else None),
        ("calibration_sha256", q.calibration_sha256 if q else None),
        ("profile_sha256", q.profile_sha256 if q else None),
    )


def step12_int8_tensor(base: Side | None, head: Side, ctx: Context) -> Finding:
    f = Finding(STEP, TITLE)
    q = head.r.quantization or Quantization()
    bq = base.r.quantization if base else None
    worst = q.worst_tensors
    for (key, b), (_, h) in zip(_shown(bq), _shown(q), strict=True):
        f.add(key, b if base else None, h)
    for w in worst[:5]:
        f.add(f"tensor {w.tensor} (node {w.node}) SQNR dB", None, w.sqnr_db)
    failed = any(c.name == "quantization" and c.status == "fail" for c in head.r.checks)
    changed = base is not None and (bq.calibration_sha256 if bq else None) not in (
        None,
        q.calibration_sha256,
    )
    if not worst:
        f.summary = "the int8 row records no per-tensor SQNR"
        return f
    w = worst[0]
    where = f"tensor {w.tensor} (node {w.node}): {w.sqnr_db:.1f} dB SQNR against fp32"
    f.summary = f"worst {where}; output {q.sqnr_db} dB, top-1 agreement {q.top1_agreement}"
    if changed:
        f.summary += "; the calibration set changed since the base"
    if failed:
        f.status = CAUSE
        f.action = (
            f"Keep node {w.node} in fp32 (quantize: {{keep_fp32: [{w.node}]}}) or "
            "calibrate on data like the inputs it runs on (guard quantize MODEL "
            "--calibration DATA --out OUT.onnx prints the same report)."
        )
    elif changed:
        f.status = SUSPECT
        f.action = "Compare the two calibration sets: the profile moved with them."
    else:
        f.status = OK
    return f
