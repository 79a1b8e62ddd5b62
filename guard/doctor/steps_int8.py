"""Step 12, for an int8 row only (a result with a ``quantization`` block): which tensor lost it.

The block (guard.run.int8) carries the int8 model's per-tensor SQNR against its fp32
source, worst first (onnxruntime's qdq_loss_debug measure, guard.quantize.sqnr), beside the
output SQNR and top-1 agreement this backend got. When the ``quantization`` check failed,
the worst tensor is the cause: the first place the int8 model's values left the fp32
model's. A calibration set or profile that changed since the base is named too: a
different calibration set is the usual reason a tensor's range no longer fits.
"""

from __future__ import annotations

from guard.doctor.facts import Context, Side
from guard.doctor.finding import CAUSE, OK, SUSPECT, Finding

STEP = 12
TITLE = "which tensor lost it"


def applies(head: Side) -> bool:
    return isinstance(head.result.get("quantization"), dict)


def step12_int8_tensor(base: Side | None, head: Side, ctx: Context) -> Finding:
    f = Finding(STEP, TITLE)
    q = head.result["quantization"]
    bq = (base.result.get("quantization") or {}) if base else {}
    worst = q.get("worst_tensors") or []
    for key in ("sqnr_db", "top1_agreement", "top1_drop", "calibration_sha256", "profile_sha256"):
        f.add(key, bq.get(key) if base else None, q.get(key))
    for w in worst[:5]:
        f.add(f"tensor {w['tensor']} (node {w['node']}) SQNR dB", None, w["sqnr_db"])
    failed = any(
        c.get("name") == "quantization" and c.get("status") == "fail"
        for c in head.result.get("checks") or []
    )
    changed = base is not None and bq.get("calibration_sha256") not in (
        None,
        q.get("calibration_sha256"),
    )
    if not worst:
        f.summary = "the int8 row records no per-tensor SQNR"
        return f
    w = worst[0]
    where = f"tensor {w['tensor']} (node {w['node']}): {w['sqnr_db']:.1f} dB SQNR against fp32"
    f.summary = (
        f"worst {where}; output {q.get('sqnr_db')} dB, top-1 agreement {q.get('top1_agreement')}"
    )
    if changed:
        f.summary += "; the calibration set changed since the base"
    if failed:
        f.status = CAUSE
        f.action = (
            f"Keep node {w['node']} in fp32 (quantize: {{keep_fp32: [{w['node']}]}}) or "
            "calibrate on data like the inputs it runs on (guard quantize MODEL "
            "--calibration DATA --out OUT.onnx prints the same report)."
        )
    elif changed:
        f.status = SUSPECT
        f.action = "Compare the two calibration sets: the profile moved with them."
    else:
        f.status = OK
    return f
