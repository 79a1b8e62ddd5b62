"""Step 10: per-kernel time (the bundled backend's kernels, an onnxruntime profile), and
the kernel that moved most between base and head."""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import TypedDict

from guard.doctor.facts import Context, Side
from guard.doctor.finding import CAUSE, SUSPECT, Finding, unknown


class KernelTime(TypedDict, total=False):
    """One kernel's time: milliseconds and share of the total (each None when the record
    lacks it), and the label a finding shows (its name and the nodes it runs)."""

    ms: float | None
    share: float | None
    label: str


def _kernels(s: Side) -> tuple[dict[str, KernelTime] | None, str]:
    """{kernel name: {ms, share}} from the result's ``kernels`` or an onnxruntime profile."""
    ks = s.r.kernels
    if ks:
        out: dict[str, KernelTime] = {}
        for k in ks:
            name = str(k.name or k.kernel or k.node or "?")
            nodes = list(k.nodes)
            label = name
            if nodes:
                # Kernel names are per-artefact indices (k3_relayout); the nodes a kernel
                # runs are what stays the same between two builds, so they are the key.
                shown = ", ".join(nodes[:2]) + (f" +{len(nodes) - 2}" if len(nodes) > 2 else "")
                label = f"{name} ({k.op or '?'}: {shown})"
                if nodes == [name]:  # onnxruntime's profiler: one row per node
                    label = f"{name} ({k.op or '?'})"
                name = f"{k.op or ''}@{','.join(nodes)}"
            out[name] = {"ms": k.time, "share": k.fraction_of_total, "label": label}
        src = next((k.source for k in ks), None)
        return out, "result kernels" + (f" ({src})" if src else "")
    art = s.artefact
    if art is not None:
        for prof in sorted(art.glob("ort_profile*.json")):
            try:
                events = json.loads(prof.read_text())
            except (OSError, json.JSONDecodeError):
                continue
            per: dict[str, float] = {}
            for e in events:
                if (
                    isinstance(e, Mapping)
                    and e.get("cat") == "Node"
                    and str(e.get("name", "")).endswith("_kernel_time")
                ):
                    node = str(e["name"])[: -len("_kernel_time")]
                    per[node] = per.get(node, 0.0) + float(e.get("dur", 0)) / 1e3
            if per:
                total = sum(per.values())
                return (
                    {k: {"ms": v, "share": v / total} for k, v in per.items()},
                    f"onnxruntime profile {prof.name}",
                )
    return None, ""


def _ms(k: KernelTime | None) -> float:
    return float(k.get("ms") or 0.0) if k else 0.0


def _counted_evidence(f: Finding, base: Side | None, head: Side) -> None:
    """The whole inference's counted cost (guard run --counted) beside the kernels' times:
    exact where the times are noise, so a kernel that moved while the count stood still
    moved by noise, and a count that moved is work that changed."""
    from guard.counting.verdict import compare_counted

    hc, bc = head.r.counted, base.r.counted if base else None
    if hc is None or hc.instructions is None:
        return
    b_instr = bc.instructions if bc is not None else None
    f.add("counted instructions / inference", b_instr, hc.instructions)
    if bc is not None and bc.instructions is not None:
        f.add("counted verdict", None, compare_counted(bc, hc).message)


def _compare_code(name: str) -> str:
    return (
        f"Compare {name}'s generated code in both artefacts (the optimised LLVM IR "
        "is kept next to the object): vector width, tiling, a lost epilogue."
    )


def _counted_kernels(s: Side | None) -> dict[str, tuple[str, float]] | None:
    """{op@nodes: (label, instructions per inference)} from the counted block's per-kernel
    counts (bundled artefacts, guard.counting.kernel_ranges), or None."""
    c = s.r.counted if s is not None else None
    ks = c.kernels if c is not None else None
    if not ks:
        return None
    out: dict[str, tuple[str, float]] = {}
    for symbol, k in ks.items():
        if k.instructions is None:
            continue
        nodes = list(k.nodes)
        key = f"{k.op or ''}@{','.join(nodes)}" if nodes else "entry"
        label = f"{symbol} ({k.op or '?'}: {', '.join(nodes[:2])})" if nodes else "entry"
        prev = out.get(key, (label, 0.0))[1]
        out[key] = (label, prev + float(k.instructions))
    return out or None


def _step10_counted(base: Side, head: Side) -> Finding | None:
    """Step 10 from counts, when both sides counted their kernels: exact, so the kernel
    whose count grew most is the kernel that got more work."""
    from guard.counting.verdict import not_comparable

    bk, hk = _counted_kernels(base), _counted_kernels(head)
    if bk is None or hk is None or not_comparable(base.r.counted, head.r.counted):
        return None
    f = Finding(10, "kernels")
    f.add("read from", None, "counted instructions per kernel (guard run --counted)")
    _counted_evidence(f, base, head)
    moves = {n: hk.get(n, ("", 0.0))[1] - bk.get(n, ("", 0.0))[1] for n in {*hk, *bk}}
    ranked = sorted(moves.items(), key=lambda kv: -kv[1])
    labels = {n: lab for n, (lab, _) in (*bk.items(), *hk.items())}
    for key, delta in ranked[:5]:
        f.add(f"kernel {labels[key]} counted instructions", bk.get(key, ("", None))[1],
              f"{hk.get(key, ('', None))[1]} ({delta:+.0f})")  # fmt: skip
    key, delta = ranked[0]
    total = sum(d for d in moves.values())
    f.add("all kernels' counted change", None, f"{total:+.0f} instructions")
    b_n, h_n = bk.get(key, ("", 0.0))[1], hk.get(key, ("", 0.0))[1]
    if delta > 0 and total > 0 and delta >= 0.5 * total:
        f.status = CAUSE
        f.summary = (
            f"kernel {labels[key]} counts {b_n:.0f} -> {h_n:.0f} instructions per inference"
            f" ({delta:+.0f}), {delta / total:.0%} of the counted increase"
        )
        f.action = _compare_code(labels[key])
    elif delta > 0:
        f.status = SUSPECT
        f.summary = f"several kernels count more; the most: {labels[key]} ({delta:+.0f})"
        f.action = "Compare the kernels listed in both artefacts."
    else:
        f.summary = "no kernel counts more instructions than in base"
    return f


def step10_kernels(base: Side | None, head: Side, ctx: Context) -> Finding:
    counted = _step10_counted(base, head) if base is not None else None
    if counted is not None:
        return counted
    f = Finding(10, "kernels")
    hk, where = _kernels(head)
    bk, _ = _kernels(base) if base else (None, "")
    if hk is None or (base is not None and bk is None):
        miss = [
            f"{s.label} kernels" for s, k in ((base, bk), (head, hk)) if s is not None and k is None
        ]
        return unknown(
            10,
            f.title,
            miss,
            "Per-kernel time comes from the bundled backend's "
            "generated code (result `kernels`) or an onnxruntime per-node profile; "
            "neither was recorded for this result.",
        )
    f.add("read from", None, where)
    _counted_evidence(f, base, head)
    labels = {n: str(k.get("label") or n) for n, k in (*(bk or {}).items(), *hk.items())}
    top = sorted(hk.items(), key=lambda kv: -_ms(kv[1]))[:5]
    for name, k in top:
        b = (bk or {}).get(name)
        f.add(
            f"kernel {labels[name]} ms (share)",
            None if b is None else f"{_ms(b):.4g} ({(b.get('share') or 0):.0%})",
            f"{_ms(k):.4g} ({(k.get('share') or 0):.0%})",
        )
    if base is None:
        key, k = top[0]
        name = labels[key]
        share = k.get("share") or 0.0
        if share >= 0.5:
            f.status = SUSPECT
            f.summary = f"one kernel, {name}, takes {share:.0%} of the time"
            f.action = f"Profile {name}: its schedule, vector width and tiling."
        else:
            f.summary = f"top kernel {name} takes {share:.0%}"
        return f
    moves = {n: _ms(hk.get(n)) - _ms((bk or {}).get(n)) for n in {*hk, *(bk or {})}}
    key, delta = max(moves.items(), key=lambda kv: kv[1])
    total = sum(d for d in moves.values())
    b_ms, h_ms = _ms((bk or {}).get(key)), _ms(hk.get(key))
    name = labels[key]
    f.add("moved most", None, f"{name}: {b_ms:.4g} -> {h_ms:.4g} ms ({delta:+.4g} ms)")
    f.add("all kernels' change", None, f"{total:+.4g} ms")
    if delta > 0 and total > 0 and delta >= 0.5 * total:
        f.status = CAUSE
        f.summary = (
            f"kernel {name} went {b_ms:.4g} -> {h_ms:.4g} ms ({h_ms / b_ms:.1f}x)"
            if b_ms
            else f"new kernel {name} takes {h_ms:.4g} ms"
        )
        f.summary += f", {delta / total:.0%} of the kernels' total slowdown"
        f.action = _compare_code(name)
    elif delta > 0 and b_ms and h_ms > 1.2 * b_ms:
        f.status = SUSPECT
        f.summary = f"kernel {name} {b_ms:.4g} -> {h_ms:.4g} ms, not most of the change"
        f.action = "Several kernels moved; check the measurement (step 1) first."
    else:
        f.summary = "no kernel got slower by more than noise"
    return f
