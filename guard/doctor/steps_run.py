"""Steps 1-3: the measurement, whether it compiled at all, and the partitions."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from guard.core.json_types import Json
from guard.doctor.facts import Context, Side, Split, splits
from guard.doctor.finding import CAUSE, OK, SUSPECT, Finding, unknown
from guard.doctor.validity import host_class
from guard.results.result import Result

CONTENDED = 0.20  # other processes' share of the spare CPU above which timings move 2x
NOISY_PCT = 10.0  # between-round spread above which a few-percent change is not visible
HOST_FIELDS = ("arch", "cpu", "cores")


def _sides(base: Side | None, head: Side) -> list[Side]:
    return [s for s in (base, head) if s is not None]


def _pair(base: Side | None, head: Side, fact: Callable[[Result], Any]) -> tuple[Any, Any]:
    return (fact(base.r) if base else None), fact(head.r)


def _shapes(s: Side) -> dict[str, Json] | None:
    """Each input's shape as the manifest recorded it."""
    ins = s.r.manifest.model.inputs  # {input name: {shape, dtype}}
    if ins is None:
        return None
    return {k: v.get("shape") for k, v in sorted(ins.items()) if isinstance(v, dict)}


def step1_measurement(base: Side | None, head: Side, ctx: Context) -> Finding:
    f = Finding(1, "measurement")
    if not head.has_manifest:
        return unknown(
            1,
            f.title,
            ["manifest"],
            "Fix the error result first: " + str(head.r.error or "it has no manifest"),
        )
    causes: list[str] = []
    suspects: list[str] = []
    shapes = [_shapes(s) for s in _sides(base, head)]
    threads = [s.r.manifest.host.threads for s in _sides(base, head)]
    hosts = [host_class(s.r) for s in _sides(base, head)]
    f.add("input shapes", shapes[0] if base else None, shapes[-1])
    f.add("threads", threads[0] if base else None, threads[-1])
    f.add("host (arch, cpu, cores)", hosts[0] if base else None, hosts[-1])
    if base is not None:
        if shapes[0] != shapes[1]:
            causes.append(f"input shapes differ ({shapes[0]} vs {shapes[1]})")
        if threads[0] != threads[1]:
            causes.append(f"threads differ ({threads[0]} vs {threads[1]})")
        if hosts[0] != hosts[1]:
            diff = [k for k in HOST_FIELDS if hosts[0][k] != hosts[1][k]]
            causes.append(f"host class differs ({', '.join(diff)})")
    for s in _sides(base, head):
        gov = s.r.preflight.governor  # {cpu: governor} as cpufreq says
        if isinstance(gov, dict):
            vals = sorted({str(v) for v in gov.values() if v is not None})
            if vals and vals != ["performance"]:
                suspects.append(f"{s.label}: CPU governor {', '.join(vals)} (not performance)")
    govs = [s.r.preflight.governor for s in _sides(base, head)]
    f.add("governor", govs[0] if base else None, govs[-1])
    if all(not isinstance(g, dict) or all(v is None for v in g.values()) for g in govs):
        f.missing.append("preflight.governor (not readable on this host: no cpufreq)")
    facts: tuple[tuple[str, Callable[[Result], Any]], ...] = (
        ("iterations", _n),
        ("min_iters", _min_iters),
        ("warm-up iterations", lambda r: r.measurement.warmup_iters),
        ("contention (others' CPU share)", lambda r: r.measurement.contention),
        ("truncated (hit max_time_s)", lambda r: r.measurement.truncated),
        ("noise_pct", lambda r: r.noise_pct),
    )
    for name, fact in facts:
        b, h = _pair(base, head, fact)
        if b is not None or h is not None:
            f.add(name, b, h)
    for s in _sides(base, head):
        noise = s.r.noise_pct
        if noise is not None and noise > NOISY_PCT:
            suspects.append(f"{s.label}: rounds disagree by {noise:.0f}% (noise_pct)")
        n, need = _n(s.r), _min_iters(s.r)
        if n is None:
            f.missing.append(f"{s.label} latency_ms.n")
        elif need is not None and n < need:
            suspects.append(f"{s.label}: {n} iterations < min_iters {need}")
        if s.r.measurement.truncated:
            suspects.append(f"{s.label}: measurement hit max_time_s before min_iters")
        wu = s.r.measurement.warmup_iters
        if wu is None:
            f.missing.append(f"{s.label} measurement.warmup_iters")
        elif wu == 0:
            suspects.append(f"{s.label}: no warm-up iteration discarded")
        c = s.r.measurement.contention
        if c is None:
            f.missing.append(f"{s.label} measurement.contention")
        elif c > CONTENDED:
            suspects.append(f"{s.label}: other processes used {c:.0%} of the spare CPU")
    if causes:
        f.status = CAUSE
        f.summary = "not like for like: " + "; ".join(causes)
        f.action = (
            "Re-run both sides with the same shapes, threads and host class; until "
            "then the latency ratio measures the set-up, not the compiler."
        )
    elif suspects:
        f.status = SUSPECT
        f.summary = "; ".join(suspects)
        f.action = (
            "Re-run on a quiet machine, or measure both sides interleaved in one "
            "process: guard ab SUITE --base BASE.yaml."
        )
    else:
        f.summary = "same shapes, threads and host class; warm-up discarded; enough iterations"
        if f.missing:
            f.summary += f" ({', '.join(f.missing)} not recorded)"
    return f


def _n(r: Result) -> int | None:
    return r.latency_ms.n if r.latency_ms is not None else None


def _min_iters(r: Result) -> Any:
    return r.measurement.config.get("min_iters")  # the suite's measure block, as it ran


def _delegation(s: Side) -> tuple[int | None, int | None, dict[str, int]]:
    p = s.r.partitions
    if p is None:
        return None, None, {}
    return p.delegated_nodes, p.fallback_nodes, dict(p.by_provider)


# Fallbacks that are a reference path rather than a second delegate.
REFERENCE_PATHS = {
    "bundled": {"cpu": "the reference interpreter"},
    "openvino": {"CPU:reference": "OpenVINO's reference (ref_*) implementations"},
}


def _reference(s: Side) -> str:
    """' (cpu: the reference interpreter)' when the side's fallback nodes ran on one."""
    paths = REFERENCE_PATHS.get(s.r.backend, {})
    by = s.r.partitions.by_provider if s.r.partitions else {}
    used = [f"{b}: {why}" for b, why in paths.items() if by.get(b)]
    return f" ({', '.join(used)})" if used else ""


def step2_compiled(base: Side | None, head: Side, ctx: Context) -> Finding:
    f = Finding(2, "compiled at all")
    if head.r.partitions is None:
        return unknown(
            2,
            f.title,
            ["partitions"],
            "This backend reports no partitions; check its logs for a fallback.",
        )
    for s in _sides(base, head):
        if s.r.partitions is None:
            return unknown(2, f.title, [f"{s.label} partitions"])
    bd, bf, bp = _delegation(base) if base else (None, None, None)
    hd, hf, hp = _delegation(head)
    f.add("delegated nodes", bd, hd)
    f.add("fallback nodes", bf, hf)
    f.add("nodes per backend/provider", bp, hp)
    if hd == 0 and (hf or 0) > 0:
        f.status = CAUSE
        f.summary = f"zero delegation: all {hf} node(s) ran on the fallback{_reference(head)}" + (
            f" (base delegated {bd})" if base else ""
        )
        f.action = (
            "Nothing reached the delegate: check the backend/profile the head was "
            "built for, and step 3's decline reasons."
        )
    elif base is not None and (hf or 0) > (bf or 0):
        f.status = SUSPECT
        f.summary = (
            f"{(hf or 0) - (bf or 0)} more node(s) on the fallback than base ({bf} -> {hf})"
            + _reference(head)
        )
        f.action = "Step 3 names the nodes and why the delegate declined them."
    elif base is None and (hf or 0) > 0:
        f.status = SUSPECT
        f.summary = f"{hf} node(s) fell back ({hd} delegated)" + _reference(head)
        f.action = "Step 3 names the nodes and why the delegate declined them."
    else:
        f.summary = f"{hd} node(s) delegated, {hf} on the fallback"
    return f


def _key(s: Split) -> tuple[str | None, str | None]:
    return (s.node, s.op)


def _why(s: Split) -> str:
    reasons = [f"{b}: {r}" for b, r in s.declined.items()]
    return "; ".join(reasons) if reasons else "reason not recorded"


def _count(r: Result) -> int | None:
    return r.partitions.count if r.partitions else None


def step3_partitions(base: Side | None, head: Side, ctx: Context) -> Finding:
    f = Finding(3, "partitions")
    bc = _count(base.r) if base else None
    hc = _count(head.r)
    if hc is None or (base is not None and bc is None):
        return unknown(
            3,
            f.title,
            [f"{s.label} partitions.count" for s in _sides(base, head) if _count(s.r) is None],
        )
    f.add("partition count", bc, hc)
    hl = head.r.layout_conversions
    if hl is not None:  # relayouts and NCHW<->NHWC transposes in the built graph
        f.add("layout conversions", base.r.layout_conversions if base else None, hl)
    hs, where = splits(head)
    bs, _ = splits(base) if base else (None, "")
    if base is not None:
        new = [s for s in hs or [] if _key(s) not in {_key(x) for x in bs or []}]
    else:
        new = list(hs or [])
    if hs is None and (hc > 1 or (bc is not None and hc != bc)):
        f.missing.append("partitions.splits (the culprit node and reason per split)")
    elif hs is not None:
        f.add("split nodes", len(bs or []) if base else None, len(hs))
        f.add("read from", None, where)
    for s in new[:10]:
        f.add(
            f"split at node {s.node!r} (op {s.op}) -> {s.backend}",
            None,
            _why(s),
        )
    grew = base is not None and bc is not None and hc > bc
    failed = head.check_status("partitions") == "fail"
    if (grew or (base is None and (failed or hc > 1))) and new:
        names = ", ".join(f"{s.op} node {s.node!r} ({_why(s)})" for s in new[:3])
        more = f" and {len(new) - 3} more" if len(new) > 3 else ""
        f.status = CAUSE if (grew or failed) else SUSPECT
        f.summary = (
            f"{bc} -> {hc} partitions; " if base else f"{hc} partitions; "
        ) + f"new split(s) at {names}{more}"
        f.action = (
            "Make the backend support the op (or pick a profile that does), or "
            "replace it in the model; then `guard reduce` on the model gives a "
            "reproducer for the compiler's owners."
        )
    elif grew:
        f.status = SUSPECT
        f.summary = f"{bc} -> {hc} partitions, culprit not recorded"
        f.action = "Run `guard partition MODEL --profile P` to see each split's reason."
    elif base is not None and bc is not None and hc < bc:
        f.summary = f"fewer partitions ({bc} -> {hc})"
    elif base is None and hc > 1:
        f.status = SUSPECT
        f.summary = f"{hc} partitions; culprit not recorded"
        f.action = "Run `guard partition MODEL --profile P` to see each split's reason."
    else:
        f.summary = f"{hc} partition(s)" + (", unchanged" if base else "")
    fallback = head.r.partitions.fallback_nodes if head.r.partitions else None
    if f.status == OK and hc == 1 and (fallback or 0) == 0:
        f.summary = "one partition, nothing on the fallback"
    return f
