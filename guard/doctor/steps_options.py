"""Step 9: options that trade speed for numerics (optimisation levels, strict or
deterministic flags) and the rewrites the passes declined."""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

from guard.core.json_types import Json
from guard.doctor.facts import Context, Side
from guard.doctor.finding import CAUSE, SUSPECT, Finding, unknown

_ORT_LEVELS = ["disabled", "basic", "extended", "layout", "all"]
_PIPELINES = ["O0", "O1", "O2"]
_FLAG = re.compile(
    r"determin|strict|precision|fp16|half|fast_?math|denormal|optimi[sz]ation_level"
    r"|pipeline|opt_level",
    re.IGNORECASE,
)


def _options(s: Side) -> dict[str, Json]:
    """Recorded options that switch fusions or fast paths (manifest.compiler, session options)."""
    out: dict[str, Json] = {}  # option -> its recorded value, whatever a backend records
    # every compiler pin, whatever the backend calls it
    for k, v in s.r.manifest.compiler.to_json().items():
        if _FLAG.search(k):
            out[f"compiler.{k}"] = v
    for name in ("build.json", "ort.json"):
        rec = s.artefact_json(name)
        so = rec.get("session_options") if isinstance(rec, Mapping) else None
        for k, v in (so or {}).items():
            if _FLAG.search(k):
                out.setdefault(f"compiler.{k}", v)
    for k, v in s.r.session_options.items():
        if _FLAG.search(k):
            out.setdefault(f"compiler.{k}", v)
    return out


def _declines(s: Side) -> dict[str, int]:
    """Pass counters of rewrites declined (folding refused, fusion declined)."""
    out = {}
    for p, stats in (s.r.graph.by_pass if s.r.graph else {}).items():
        for k, v in (stats or {}).items():
            if "declined" in k and isinstance(v, int):
                out[f"{p}.{k}"] = v
    return out


def _slower(key: str, b: Any, h: Any) -> bool:
    for order in (_ORT_LEVELS, _PIPELINES):
        if b in order and h in order:
            return order.index(h) < order.index(b)
    if isinstance(b, bool) and isinstance(h, bool):
        return h and not b  # a strict/deterministic flag switched on
    return False


def step9_numerics_options(base: Side | None, head: Side, ctx: Context) -> Finding:
    f = Finding(9, "numerics-driven refusals (options)")
    ho = _options(head)
    bo = _options(base) if base else {}
    if not ho and not bo:
        return unknown(
            9,
            f.title,
            ["manifest.compiler optimisation options"],
            "This backend records no optimisation level or precision flags.",
        )
    for k in sorted({*ho, *bo}):
        f.add(k, bo.get(k) if base else None, ho.get(k))
    hd, bd = _declines(head), _declines(base) if base else {}
    for k in sorted({*hd, *bd}):
        if hd.get(k, 0) != bd.get(k, 0) or (base is None and hd.get(k)):
            f.add(f"declined: {k}", bd.get(k) if base else None, hd.get(k))
    # The numerics these options trade: error against the golden, and whether the outputs
    # changed at all (a fast path switched on or off moves the last bits).
    f.add(
        "max abs err vs the golden",
        base.r.numerics.max_abs_err if base else None,
        head.r.numerics.max_abs_err,
    )
    if base is not None and base.r.numerics.output_sha256 and head.r.numerics.output_sha256:
        f.add(
            "outputs changed",
            None,
            base.r.numerics.output_sha256 != head.r.numerics.output_sha256,
        )
    backend = head.r.backend
    if backend == "onnxruntime":
        f.missing.append(
            "onnxruntime use_deterministic_compute (guard does not set it: the default, off)"
        )
    slower = [
        k
        for k in sorted(ho)
        if base is not None and k in bo and bo[k] != ho[k] and _slower(k, bo[k], ho[k])
    ]
    other = [
        k
        for k in sorted({*ho, *bo})
        if base is not None and bo.get(k) != ho.get(k) and k not in slower
    ]
    more_declines = [k for k in hd if base is not None and hd[k] > bd.get(k, 0)]
    if slower:
        f.status = CAUSE
        f.summary = "head disables fast paths: " + ", ".join(
            f"{k} {bo[k]} -> {ho[k]}" for k in slower
        )
        f.action = (
            "Build the head with the base's optimisation level (suite "
            "options.<backend>), or confirm the lower level is intended (a precision "
            "or determinism requirement) and re-baseline."
        )
    elif other or more_declines:
        f.status = SUSPECT
        f.summary = "options differ: " + ", ".join(
            [f"{k} {bo.get(k)} -> {ho.get(k)}" for k in other]
            + [f"{k} {bd.get(k, 0)} -> {hd[k]}" for k in more_declines]
        )
        f.action = "Check whether the option change disables a fusion the base relied on."
    elif base is None and any(v in ("disabled", "basic", "O0", "O1") for v in ho.values()):
        f.status = SUSPECT
        f.summary = "built with fast paths off: " + ", ".join(f"{k}={v}" for k, v in ho.items())
        f.action = "Unless a precision requirement needs it, build with every optimisation on."
    else:
        f.summary = ", ".join(f"{k}={v}" for k, v in ho.items()) + (
            ", same on both sides" if base else ""
        )
    return f
