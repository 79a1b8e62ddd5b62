"""Step 8: the arena against the host's memory hierarchy (the caches that hold it)."""

from __future__ import annotations

from collections.abc import Mapping

from guard.doctor.facts import Context, HostCache, Side, fits_in, mib
from guard.doctor.finding import CAUSE, SUSPECT, Finding, unknown

_RANK = {"L1d": 1, "L1": 1, "L2": 2, "L3": 3, "L4": 4, "DRAM": 9}


def _recorded_caches(s: Side) -> list[HostCache] | None:
    """Caches the measuring host recorded (manifest.host.caches, older records' list)."""
    rec = s.r.manifest.host.caches
    if not isinstance(rec, list):
        return None
    out = []
    for c in rec:
        if isinstance(c, Mapping) and isinstance(c.get("bytes"), int) and c.get("name") in _RANK:
            name = c["name"]
            out.append(HostCache(name, c.get("level", _RANK[name]), c.get("type"), c["bytes"],
                                 int(c.get("shared_cpus") or 1)))  # fmt: skip
    return sorted(out, key=lambda c: c.level) or None


def step8_arena(base: Side | None, head: Side, ctx: Context) -> Finding:
    f = Finding(8, "arena vs memory hierarchy")
    ha = head.r.arena_bytes
    ba = base.r.arena_bytes if base else None
    if ha is None or (base is not None and ba is None):
        return unknown(
            8,
            f.title,
            [
                f"{s.label} arena_bytes"
                for s in (base, head)
                if s is not None and s.r.arena_bytes is None
            ],
        )
    f.add("arena bytes", ba, ha)
    f.add(
        "lower bound bytes",
        base.r.arena_lower_bound_bytes if base else None,
        head.r.arena_lower_bound_bytes,
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
            f"{c.name} {mib(c.bytes)}"
            + (" per core" if c.shared_cpus == 1 else f" shared by {c.shared_cpus}")
            for c in caches
        ),
    )
    hl = fits_in(ha, caches)
    bl = fits_in(ba, caches) if ba is not None else None
    f.add("smallest level holding the arena", bl, hl)
    ran_on = {s.r.manifest.host.cpu for s in (base, head) if s is not None}
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
    if bl is not None and _RANK[hl] > _RANK[bl]:
        cache = next(c for c in caches if c.name == bl)
        f.status = SUSPECT if other_host else CAUSE
        f.summary = (
            f"arena grew past {bl}: {mib(ba)} -> {mib(ha)} ({bl} is {mib(cache.bytes)}"
            f"{' per core' if cache.shared_cpus == 1 else ''}); the head now streams "
            f"its intermediates from {hl}"
        )
        f.action = (
            "Find what grew (the memory plan's largest tensors, concat/split elision that "
            "stopped, a copy where a view was): guard partition MODEL shows the plan."
        )
    elif ba is not None and ha > 1.1 * ba:
        f.status = SUSPECT
        f.summary = f"arena grew {ha / max(ba, 1):.2f}x ({mib(ba)} -> {mib(ha)}), still within {hl}"
        f.action = "Check the memory plan's copies and elided nodes in both artefacts."
    else:
        f.summary = f"arena {mib(ha)} fits {hl}" + (
            f" (base {mib(ba)}, {bl})" if ba is not None else ""
        )
    return f
