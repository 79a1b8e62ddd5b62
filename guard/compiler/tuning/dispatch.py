"""Where a kernel's schedule comes from while the code generator emits it.

A dispatch context (TVM's ``autotvm.apply_history_best`` / ``DispatchContext`` pattern)
is active around one build: each GEMM and convolution emitter asks it for the schedule
of its task (:func:`gemm_schedule`, :func:`conv_schedule`) and gets the cache's entry on an
exact key match (a hit) or the default heuristic (a miss, recorded with the nearest key
in the cache and how it differs). With no context active, every emitter uses its
default: plain ``generate`` and ``jit`` are unchanged.

Hits and misses count distinct tasks (a GEMM shape that occurs 12 times in a model is one
task), and what is counted is exactly what is emitted: the look-up is the emitter's.
"""

from __future__ import annotations

import contextlib
import contextvars
import warnings
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, NotRequired, TypedDict

from guard.compiler.codegen.conv.schedule import ConvSchedule, Geometry, default_conv_schedule
from guard.compiler.codegen.gemm.schedule import default_gemm_schedule
from guard.compiler.tuning.cache import Entry, TuningCache
from guard.compiler.tuning.keys import TaskKey, differences, nearest
from guard.compiler.tuning.schedule_json import Schedule

MAX_MISSED_RECORDED = 50

_ACTIVE: contextvars.ContextVar[Dispatch | None] = contextvars.ContextVar(
    "guard_tuning_dispatch", default=None
)


class MissedKey(TypedDict):
    """A missed task in the summary: its key, the cache's nearest key and how it differs."""

    key: str
    nearest: str | None
    differs: str


class DispatchSummary(TypedDict):
    """:meth:`Dispatch.summary`, the manifest's tuning_cache observations."""

    entries: int | None  # None: no cache
    hits: int
    misses: int
    tasks: int
    missed: list[MissedKey]  # at most MAX_MISSED_RECORDED
    kernel_speedup: NotRequired[float]  # only when a task hit


@dataclass
class Lookup:
    key: TaskKey
    hit: bool
    nearest: TaskKey | None = None
    differs: tuple[str, ...] = ()

    def missed_record(self) -> MissedKey:
        return {
            "key": self.key.text,
            "nearest": self.nearest.text if self.nearest else None,
            "differs": "; ".join(self.differs) if self.nearest else "the cache is empty",
        }


class Dispatch:
    """Schedules for one build: from ``cache`` (may be None: all defaults, nothing counted),
    or ``forced`` (key text -> schedule: the tuner measuring one candidate)."""

    def __init__(
        self,
        cache: TuningCache | None,
        target: str,
        compiler: str,
        forced: Mapping[str, Schedule] | None = None,
    ) -> None:
        self.cache = cache
        self.target = target
        self.compiler = compiler
        self.forced = dict(forced or {})
        self.looked: dict[str, Lookup] = {}

    def key(self, op: str, shape: list[tuple[str, int | str]], dtype: str = "float32") -> TaskKey:
        return TaskKey(op, tuple(shape), dtype, self.target, self.compiler)

    def choose(self, key: TaskKey, default: Any, record: bool = True) -> Any:
        """The cache's schedule for ``key`` on a hit, else ``default``; ``record=False``
        asks without counting (a planner's what-if, not an emitted kernel)."""
        if key.text in self.forced:
            return self.forced[key.text]
        if self.cache is None:
            return default
        entry = self.cache.get(key)
        if record and key.text not in self.looked:
            if entry is not None:
                self.looked[key.text] = Lookup(key, True)
            else:
                near = nearest(key, self.cache.keys())
                diff = tuple(differences(key, near)) if near else ()
                self.looked[key.text] = Lookup(key, False, near, diff)
        return entry.schedule if entry is not None else default

    @property
    def hits(self) -> int:
        return sum(1 for x in self.looked.values() if x.hit)

    @property
    def misses(self) -> int:
        return sum(1 for x in self.looked.values() if not x.hit)

    def summary(self) -> DispatchSummary:
        """The manifest's tuning_cache observations: entries, hits, misses, missed keys."""
        missed = [x.missed_record() for x in self.looked.values() if not x.hit]
        out: DispatchSummary = {
            "entries": len(self.cache) if self.cache is not None else None,
            "hits": self.hits,
            "misses": self.misses,
            "tasks": len(self.looked),
            "missed": missed[:MAX_MISSED_RECORDED],
        }
        hit = [e for e in (self._entry(x.key) for x in self.looked.values() if x.hit) if e]
        if hit:
            # What tuning measured for the hit tasks (each kernel alone): their default
            # schedules' time over their tuned time, weighted by share of runtime.
            out["kernel_speedup"] = weighted_speedup(hit)
        return out

    def _entry(self, key: TaskKey) -> Entry | None:
        return self.cache.get(key) if self.cache is not None else None

    def warn_misses(self, where: str) -> None:
        """One warning per missed task: its shape, and how the nearest key differs (only
        the attribute that differs: the full keys are in :meth:`summary`'s ``missed``)."""
        for x in self.looked.values():
            if x.hit:
                continue
            if x.nearest is None:
                why = "the cache has no entries"
            else:
                why = f"nearest {x.nearest.short()}: {'; '.join(x.differs)}"
            warnings.warn(
                f"bundled tuning cache {where}: miss for {x.key.short()}; {why}; "
                "using the default schedule (full keys: the manifest's tuning_cache.missed)",
                stacklevel=2,
            )


def weighted_speedup(entries: Sequence[Entry]) -> float:
    """Default over tuned kernel time of ``entries``, each task weighted by its share of
    the model's runtime: its per-call times times the steps that run it (``count``, as
    the tuner recorded it from the model's kernel plan; 1 if absent)."""
    n = [max(1, int(e.extra.get("measured", {}).get("count", 1))) for e in entries]
    tuned = sum(c * e.time_s for c, e in zip(n, entries, strict=True))
    default = sum(c * e.default_time_s for c, e in zip(n, entries, strict=True))
    return round(default / tuned, 3) if tuned > 0 else 1.0


@contextlib.contextmanager
def applied(d: Dispatch) -> Iterator[Dispatch]:
    token = _ACTIVE.set(d)
    try:
        yield d
    finally:
        _ACTIVE.reset(token)


def active() -> Dispatch | None:
    return _ACTIVE.get()


# -- what the emitters call ----------------------------------------------------------------


def gemm_shape(gs: Any) -> list[tuple[str, int | str]]:
    """The full shape signature of a GEMM task (emit_gemm.GemmShape)."""
    return [
        ("M", int(gs.M)), ("N", int(gs.N)), ("K", int(gs.K)), ("batch", int(gs.batch)),
        ("trans_a", int(gs.trans_a)), ("trans_b", int(gs.trans_b)),
    ]  # fmt: skip


def conv_shape(geo: Geometry) -> list[tuple[str, int | str]]:
    """The full shape signature of a convolution task (emit_conv.Geometry)."""
    return [
        ("N", geo.N), ("C", geo.C), ("H", geo.H), ("W", geo.W), ("K", geo.K),
        ("R", geo.R), ("S", geo.S), ("group", geo.g), ("stride", f"{geo.sh}x{geo.sw}"),
        ("dilation", f"{geo.dh}x{geo.dw}"), ("pads", f"{geo.pt},{geo.pl},{geo.pb},{geo.pr}"),
        ("layout", geo.layout),
    ]  # fmt: skip


def gemm_schedule(gs: Any, vector_width: int, record: bool = True) -> Any:
    """The GemmSchedule for one GEMM: the cache's on a hit, else the default heuristic.
    ``record=False``: a question about a kernel that may never be emitted (the thread
    split's probe), not counted as a hit or a miss."""
    # a column task (GemmShape.col0) takes the whole GEMM's tile: B is packed for it
    default = default_gemm_schedule(gs.M, gs.ldc, gs.K, vector_width)
    d = _ACTIVE.get()
    if d is None:
        return default
    return d.choose(d.key("gemm", gemm_shape(gs)), default, record)


def conv_schedule(geo: Geometry) -> ConvSchedule:
    """The ConvSchedule for one direct convolution: the cache's on a hit, else the default."""
    default = default_conv_schedule(geo)
    d = _ACTIVE.get()
    if d is None or geo.L <= 1:  # the scalar path (L == 1) is not tuned
        return default
    chosen: ConvSchedule = d.choose(d.key("conv", conv_shape(geo)), default)
    return chosen
