"""Steps 8-11: the arena against the caches, numerics-driven options, kernels, reduce."""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from typing import Any

from guard.doctor.facts import Side, fits_in, mib
from guard.doctor.finding import CAUSE, NA, OK, SUSPECT, Finding, unknown

_RANK = {"L1d": 1, "L1": 1, "L2": 2, "L3": 3, "L4": 4, "DRAM": 9}


def _recorded_caches(s: Side) -> list[dict[str, Any]] | None:
    """Caches the measuring host recorded (manifest.host.caches), in host_caches' shape."""
    rec = s.get("manifest.host.caches")
    if not isinstance(rec, list):
        return None
    out = []
    for c in rec:
        if isinstance(c, Mapping) and isinstance(c.get("bytes"), int) and c.get("name") in _RANK:
            out.append(
                {
                    "name": c["name"],
                    "level": c.get("level", _RANK[c["name"]]),
                    "type": c.get("type"),
                    "bytes": c["bytes"],
                    "shared_cpus": int(c.get("shared_cpus") or 1),
                }
            )
    return sorted(out, key=lambda c: c["level"]) or None


def step8_arena(base: Side | None, head: Side, ctx: Any) -> Finding:
    f = Finding(8, "arena vs memory hierarchy")
    ha = head.get("arena_bytes")
    ba = base.get("arena_bytes") if base else None
    if ha is None or (base is not None and ba is None):
        return unknown(
            8,
            f.title,
            [
                f"{s.label} arena_bytes"
                for s in (base, head)
                if s is not None and s.get("arena_bytes") is None
            ],
        )
    f.add("arena bytes", ba, ha)
    f.add(
        "lower bound bytes",
        base.get("arena_lower_bound_bytes") if base else None,
        head.get("arena_lower_bound_bytes"),
    )
    recorded = _recorded_caches(head)
    caches = recorded or ctx.caches
    if not caches:
        f.status = "unknown"
        f.missing.append("host caches (sysfs /sys/devices/system/cpu/cpu0/cache unreadable)")
        f.summary = f"unknown: host cache sizes not readable; arena {mib(ba)} -> {mib(ha)}"
        return f
    f.add(
        "host caches (" + ("recorded with the result" if recorded else "this machine, cpu0") + ")",
        None,
        ", ".join(
            f"{c['name']} {mib(c['bytes'])}"
            + (" per core" if c["shared_cpus"] == 1 else f" shared by {c['shared_cpus']}")
            for c in caches
        ),
    )
    hl = fits_in(ha, caches)
    bl = fits_in(ba, caches) if base else None
    f.add("smallest level holding the arena", bl, hl)
    ran_on = {s.get("manifest.host.cpu") for s in (base, head) if s is not None}
    other_host = (
        not recorded and ctx.host_cpu is not None and ran_on - {None} and ctx.host_cpu not in ran_on
    )
    if other_host:
        f.add(
            "note",
            None,
            f"cache sizes are this machine's ({ctx.host_cpu}); the results ran "
            f"on {', '.join(sorted(str(x) for x in ran_on))}",
        )
    if base is not None and _RANK[hl] > _RANK[bl or "L1d"]:
        cache = next(c for c in caches if c["name"] == bl)
        f.status = SUSPECT if other_host else CAUSE
        f.summary = (
            f"arena grew past {bl}: {mib(ba)} -> {mib(ha)} ({bl} is {mib(cache['bytes'])}"
            f"{' per core' if cache['shared_cpus'] == 1 else ''}); the head now streams "
            f"its intermediates from {hl}"
        )
        f.action = (
            "Find what grew (the memory plan's largest tensors, concat/split elision that "
            "stopped, a copy where a view was): guard partition MODEL shows the plan."
        )
    elif base is not None and ha > 1.1 * ba:
        f.status = SUSPECT
        f.summary = f"arena grew {ha / max(ba, 1):.2f}x ({mib(ba)} -> {mib(ha)}), still within {hl}"
        f.action = "Check the memory plan's copies and elided nodes in both artefacts."
    else:
        f.summary = f"arena {mib(ha)} fits {hl}" + (f" (base {mib(ba)}, {bl})" if base else "")
    return f


# -- step 9 -----------------------------------------------------------------------------------

_ORT_LEVELS = ["disabled", "basic", "extended", "layout", "all"]
_PIPELINES = ["O0", "O1", "O2"]
_FLAG = re.compile(
    r"determin|strict|precision|fp16|half|fast_?math|denormal|optimi[sz]ation_level"
    r"|pipeline|opt_level",
    re.IGNORECASE,
)


def _options(s: Side) -> dict[str, Any]:
    """Recorded options that switch fusions or fast paths (manifest.compiler, session options)."""
    out: dict[str, Any] = {}
    for k, v in (s.get("manifest.compiler") or {}).items():
        if _FLAG.search(k):
            out[f"compiler.{k}"] = v
    for name in ("build.json", "ort.json"):
        rec = s.artefact_json(name)
        so = rec.get("session_options") if isinstance(rec, Mapping) else None
        for k, v in (so or {}).items():
            if _FLAG.search(k):
                out.setdefault(f"compiler.{k}", v)
    for k, v in (s.get("session_options") or {}).items():
        if _FLAG.search(k):
            out.setdefault(f"compiler.{k}", v)
    return out


def _declines(s: Side) -> dict[str, int]:
    """Pass counters of rewrites declined (folding refused, fusion declined)."""
    out = {}
    for p, stats in (s.get("graph.by_pass") or {}).items():
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


def step9_numerics_options(base: Side | None, head: Side, ctx: Any) -> Finding:
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
        base.get("numerics.max_abs_err") if base else None,
        head.get("numerics.max_abs_err"),
    )
    if (
        base is not None
        and base.get("numerics.output_sha256")
        and head.get("numerics.output_sha256")
    ):
        f.add(
            "outputs changed",
            None,
            base.get("numerics.output_sha256") != head.get("numerics.output_sha256"),
        )
    backend = head.result.get("backend")
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


# -- step 10 ----------------------------------------------------------------------------------


def _kernels(s: Side) -> tuple[dict[str, dict[str, float]] | None, str]:
    """{kernel name: {ms, share}} from the result's ``kernels`` or an onnxruntime profile."""
    ks = s.get("kernels")
    if isinstance(ks, Mapping):  # {"top": [...], ...} or {name: {...}}
        ks = (
            ks.get("top")
            if isinstance(ks.get("top"), list)
            else [
                {"name": k, **(v if isinstance(v, Mapping) else {"ms": v})} for k, v in ks.items()
            ]
        )
    if isinstance(ks, list) and ks:
        out: dict[str, dict[str, float]] = {}
        for k in ks:
            if not isinstance(k, Mapping):
                continue
            name = str(k.get("name") or k.get("kernel") or k.get("node") or "?")
            nodes = [str(n) for n in k.get("nodes") or []]
            label = name
            if nodes:
                # Kernel names are per-artefact indices (k3_relayout); the nodes a kernel
                # runs are what stays the same between two builds, so they are the key.
                shown = ", ".join(nodes[:2]) + (f" +{len(nodes) - 2}" if len(nodes) > 2 else "")
                label = f"{name} ({k.get('op') or '?'}: {shown})"
                name = f"{k.get('op') or ''}@{','.join(nodes)}"
            ms = next(
                (
                    float(k[f]) * m
                    for f, m in (
                        ("ms", 1),
                        ("time_ms", 1),
                        ("mean_ms", 1),
                        ("us", 1e-3),
                        ("time_us", 1e-3),
                        ("seconds", 1e3),
                        ("s", 1e3),
                    )
                    if isinstance(k.get(f), (int, float))
                ),
                None,
            )
            share = next(
                (float(k[f]) for f in ("share", "fraction") if isinstance(k.get(f), (int, float))),
                None,
            )
            if share is None and isinstance(k.get("pct"), (int, float)):
                share = float(k["pct"]) / 100
            out[name] = {"ms": ms, "share": share, "label": label}  # type: ignore[dict-item]
        return out, "result kernels"
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


def _ms(k: Mapping[str, Any] | None) -> float:
    return float((k or {}).get("ms") or 0.0)


def step10_kernels(base: Side | None, head: Side, ctx: Any) -> Finding:
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
        f.action = (
            f"Compare {name}'s generated code in both artefacts (the optimised LLVM IR "
            "is kept next to the object): vector width, tiling, a lost epilogue."
        )
    elif delta > 0 and b_ms and h_ms > 1.2 * b_ms:
        f.status = SUSPECT
        f.summary = f"kernel {name} {b_ms:.4g} -> {h_ms:.4g} ms, not most of the change"
        f.action = "Several kernels moved; check the measurement (step 1) first."
    else:
        f.summary = "no kernel got slower by more than noise"
    return f


def step11_reduce(base: Side | None, head: Side, ctx: Any, earlier: list[Finding]) -> Finding:
    f = Finding(11, "file it, with the smallest graph")
    # A measurement problem (step 1) is fixed by measuring again, not by a reproducer.
    bad = [x for x in earlier if x.status in (CAUSE, SUSPECT) and x.step != 1]
    numerics = (head.check("tolerance") or {}).get("status") == "fail"
    if not bad and not numerics:
        f.status = NA
        f.summary = "nothing to file: " + (
            "fix the measurement first (step 1)"
            if earlier[0].status in (CAUSE, SUSPECT)
            else "no step found a cause"
        )
        return f
    model = head.result.get("model")
    suite = ctx.suite_path or "SUITE.yaml"
    src = ctx.model_source(head)
    first = next((x for x in bad if x.status == CAUSE), bad[0] if bad else None)
    split = (head.check("partitions") or {}).get("status") == "fail" or (
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
        f"--backend {head.result.get('backend')} {mode}; attach the bundle it writes "
        "(reduced .onnx, inputs, one-model suite, summary)."
    )
    return f
