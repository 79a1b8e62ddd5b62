"""Step 6: the schedule cache. A tuned-schedule cache is keyed by operator, shape, dtype
and target string; a miss silently falls back to a 2-10x slower schedule.

``manifest.tuning_cache`` is read in either shape a backend records: the tvm backend's
look-up (hits, misses, missed task names, misses whose workload was tuned for another
target) or a keyed cache's misses with the nearest key and how it differs.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from guard.doctor.facts import Context, Side
from guard.doctor.finding import CAUSE, NA, SUSPECT, Finding, unknown
from guard.manifest.target_string import TargetError, target_changes
from guard.results.manifest import MissedKey, TuningCache


def target_difference(a: str, b: str) -> str:
    """How target string ``b`` differs from ``a``: "mattr +sve added; mcpu x -> y"."""
    try:
        changes = target_changes(a, b)
    except TargetError as exc:
        return f"cannot compare them here: {exc}"
    parts = []
    for k, x, y in changes:
        if k != "mattr":
            parts.append(f"{k} {x} -> {y}")
            continue
        parts += [f"mattr {','.join(x)} added"] if x else []
        parts += [f"mattr {','.join(y)} removed"] if y else []
    return "; ".join(parts) or "same target"


def _missed(tc: TuningCache) -> list[str]:
    """Missed keys, whichever shape the cache records (strings, or {key, nearest, differs})."""
    out = []
    for m in tc.missed:
        if isinstance(m, Mapping):
            k = MissedKey.of(m)
            key = k.key or k.task or k.name
            diff = k.differs or k.diff or k.difference
            near = k.nearest
            s = str(key)
            if near is not None:
                s += f" (nearest {near}" + (f": {diff})" if diff else ")")
            elif diff:
                s += f" ({diff})"
            out.append(s)
        else:
            out.append(str(m))
    return out


def step6_tuning(base: Side | None, head: Side, ctx: Context) -> Finding:
    f = Finding(6, "schedule cache (tuning)")
    tcs = [(s, s.r.manifest.tuning_cache) for s in (base, head) if s is not None]
    if not any(tc.path or tc.sha256 for _, tc in tcs):
        f.status = NA
        f.summary = "no tuning cache on either side"
        return f
    miss = [
        f"{s.label} manifest.tuning_cache.{k}"
        for s, tc in tcs
        if tc.path or tc.sha256
        for k, v in (("hits", tc.hits), ("misses", tc.misses))
        if v is None
    ]
    if miss:
        return unknown(
            6,
            f.title,
            miss,
            "This backend does not report cache look-ups; run "
            "`guard tune` and a build that counts hits and misses.",
        )
    bt = base.r.manifest.tuning_cache if base else None
    ht = head.r.manifest.tuning_cache

    def shown(tc: TuningCache) -> tuple[tuple[str, Any], ...]:
        return (("sha256", tc.sha256[:12] if tc.sha256 else tc.sha256), ("entries", tc.entries),
                ("hits", tc.hits), ("misses", tc.misses),
                ("misses_tuned_for_other_target", tc.misses_tuned_for_other_target))  # fmt: skip

    b_shown = shown(bt) if bt is not None else None
    for i, (k, h) in enumerate(shown(ht)):
        b = b_shown[i][1] if b_shown is not None else None
        if b is not None or h is not None:
            f.add(k, b, h)
    keys = _missed(ht)
    for k in keys[:5]:
        f.add("missed key", None, k)
    btarget = base.r.manifest.target.canonical if base else None
    htarget = head.r.manifest.target.canonical
    tdiff = target_difference(btarget, htarget) if btarget and htarget else None
    if base is not None:
        f.add("target (canonical) difference", None, tdiff)
    other = int(ht.misses_tuned_for_other_target or 0)
    hm, hh = int(ht.misses or 0), int(ht.hits or 0)
    bm = int(bt.misses or 0) if bt is not None else 0
    worse = hm > bm if base is not None else hm > 0
    if worse:
        why = []
        if other:
            why.append(
                f"{other} of {hm} missed workload(s) are in the cache, tuned for another target"
            )
        if tdiff and tdiff != "same target":
            why.append(f"nearest key's difference: target {tdiff}")
        elif keys and any("nearest" in k for k in keys):
            why.append(f"nearest key: {keys[0]}")
        failed = head.check_status("tuning") == "fail"
        f.status = CAUSE if (why and (base is not None or failed)) else SUSPECT
        f.summary = (
            f"{hm} miss(es), {hh} hit(s)"
            + (f" (base {bm} miss(es))" if base else "")
            + (
                "; " + "; ".join(why)
                if why
                else "; the missed keys' nearest entries are not recorded"
            )
        )
        f.action = (
            "Re-tune for the head's target (`guard tune SUITE --db DIR`), or build for "
            "the target the cache was tuned for; gate with checks.tuning.min_hit_rate."
        )
    else:
        f.summary = f"{hh} hit(s), {hm} miss(es)" + (", no new misses" if base else "")
    return f
