"""One side of a two-ref A/B: builds and loads a suite's cases, then times them on request.

``guard ab SUITE --base-ref REF`` starts one worker per side, each under that side's
interpreter and with that side's source tree first on ``PYTHONPATH``, so each side runs
its own guard (compiler, backends) and its own pinned dependencies. The coordinator then
asks the two workers for samples in alternation (AB, BA, ...): the same runner, the same
minutes, paired. A worker only times what it is asked to; it never decides anything.

This file is run by path (``python ab_worker.py``), not imported from the side's tree:
the side's tree may predate it. It speaks JSON lines: one request on stdin, one reply on
stdout. Anything else the side's libraries print goes to stderr, so it cannot corrupt
the protocol.

Requests (``op``): ``prepare`` {suite, workdir} -> {cases, guard_file}; ``warm`` {case,
seconds, min_sample_s} -> {inner}; ``time`` {case, inner} -> {ms}; ``cpu`` -> {cpu_s};
``count`` {case} -> {counted, missing, regress_pct} (guard.run.counted, by this side's
guard); ``quit``. A failure replies {ok: false, error, kind: "usage" | "internal"}.
"""

from __future__ import annotations

import base64
import importlib
import io
import json
import os
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypedDict

if TYPE_CHECKING:  # the side's tree may predate guard.results: nothing of guard at run time
    from guard.results.record import Json


def _prepare_cases() -> Callable[[Path, Path], list[Any]]:
    """The side's own ``prepare_cases``, wherever the side's tree keeps it: guard.run.case
    (this layout), guard.case (before the packages were cut by layer), or guard.pipeline
    (before guard/pipeline.py was split by job). Imported by name: a side's tree may have
    any one of them."""
    for name in ("guard.run.case", "guard.case", "guard.pipeline"):
        try:
            return importlib.import_module(name).prepare_cases
        except ImportError:
            continue
    raise ImportError("this guard tree has no prepare_cases (guard.run.case, guard.case)")


def _counted_config_class() -> Any:
    """The side's ``CountedConfig``, wherever the side's tree keeps it: guard.counting.count
    (this layout) or guard.emulate.counted (before counting had its own package)."""
    for name in ("guard.counting.count", "guard.emulate.counted"):
        try:
            return importlib.import_module(name).CountedConfig
        except ImportError:
            continue
    raise ImportError("this guard tree has no CountedConfig")


def _outputs_b64(case: Any) -> str | None:
    import numpy as np

    try:
        outs = [np.asarray(o) for o in case.session.run(case.feeds)]
    except Exception:  # noqa: BLE001 - a case whose outputs cannot be read is still timed
        return None
    buf = io.BytesIO()
    np.savez(buf, *outs)
    return base64.b64encode(buf.getvalue()).decode()


def _suite_regress_pct(entry: Any) -> Any:
    """The entry's ``checks.latency.regress_pct``: a record's field in this layout, a
    mapping's key in a side's tree from before the suite's check blocks were typed."""
    checks = getattr(entry, "checks", None)
    if isinstance(checks, dict):
        return (checks.get("latency") or {}).get("regress_pct")
    latency = getattr(checks, "latency", None)
    return getattr(latency, "regress_pct", None)


class CaseJson(TypedDict):
    """A case as ``prepare`` describes it (guard.experiment.ab_ref.CaseDescription reads it)."""

    model: str
    backend: str
    target: str
    manifest: Json
    regress_pct: Json  # the suite's checks.latency.regress_pct for it
    partitions: Json
    arena_bytes: int | None
    outputs_npz: str | None  # its outputs as a base64 .npz


class Prepared(TypedDict):
    cases: list[CaseJson]
    guard_file: str


class Warmed(TypedDict):
    inner: int  # calls per timed sample


class Timed(TypedDict):
    ms: float  # one call's time


class CountJson(TypedDict):
    """A case's counted block as counted by this side's guard (guard.experiment.ab_ref's
    CountReply reads it)."""

    counted: Json
    missing: list[str]
    regress_pct: Json


class CpuTime(TypedDict):
    cpu_s: float


def _describe(case: Any) -> CaseJson:
    regress_pct = _suite_regress_pct(getattr(case, "entry", None))
    partitions: Json
    try:
        partitions = case.session.partitions().to_dict()
    except Exception:  # noqa: BLE001 - a backend that cannot describe them is still timed
        partitions = None
    arena_bytes: int | None
    try:
        arena_bytes = case.session.memory().arena_bytes
    except Exception:  # noqa: BLE001
        arena_bytes = None
    return {
        "model": case.model,
        "backend": case.backend,
        "target": case.target,
        "manifest": case.manifest,
        "regress_pct": regress_pct,
        "partitions": partitions,
        "arena_bytes": arena_bytes,
        "outputs_npz": _outputs_b64(case),
    }


class Worker:
    def __init__(self) -> None:
        self.cases: list[Any] = []
        self.workdir = Path.cwd()

    def prepare(self, suite: str, workdir: str) -> Prepared:
        import guard

        self.workdir = Path(workdir)
        self.cases = list(_prepare_cases()(Path(suite), Path(workdir)))
        return {"cases": [_describe(c) for c in self.cases], "guard_file": guard.__file__}

    def _timed(self, fn: Any, inner: int) -> float:
        t0 = time.perf_counter()
        for _ in range(inner):
            fn()
        return time.perf_counter() - t0

    def warm(self, case: int, seconds: float, min_sample_s: float) -> Warmed:
        fn = self.cases[case].run_once
        end = time.perf_counter() + seconds
        fn()
        while time.perf_counter() < end:
            fn()
        inner = 1
        while inner < 10_000 and self._timed(fn, inner) < min_sample_s:
            inner *= 2
        return {"inner": inner}

    def time(self, case: int, inner: int) -> Timed:
        return {"ms": self._timed(self.cases[case].run_once, inner) * 1e3 / inner}

    def count(self, case: int) -> CountJson:
        """The case's counted block, counted as ``guard run --counted`` counts it."""
        try:
            counted_config_cls = _counted_config_class()
            from guard.run.counted import count_case, counted_against, counted_config
        except ImportError:
            return {"counted": {"error": "this side's guard has no counted runs"},
                    "missing": [], "regress_pct": None}  # fmt: skip
        c = self.cases[case]
        missing: list[str] = []
        block = count_case(c, counted_config(c.entry, True) or counted_config_cls(), self.workdir,
                           missing)  # fmt: skip
        bound, _ = counted_against(c.entry, None, None, None)
        # the reply is JSON: a side whose count_case returns the typed block (a record of
        # guard.results.counted) writes it back as it was counted; older sides return JSON
        to_json = getattr(block, "to_json", None)
        counted = to_json() if callable(to_json) else block
        return {"counted": counted, "missing": missing[:1], "regress_pct": bound}

    def cpu(self) -> CpuTime:
        t = os.times()
        return {"cpu_s": t.user + t.system}


def serve(stdin: Any, proto: Any) -> int:
    worker = Worker()
    for line in stdin:
        req = json.loads(line)
        op = req.pop("op")
        if op == "quit":
            return 0
        try:
            reply = {"ok": True, **getattr(worker, op)(**req)}
        except Exception as exc:  # noqa: BLE001 - the coordinator reports it with the side
            from guard.core.errors import UsageError

            kind = "usage" if isinstance(exc, UsageError) else "internal"
            reply = {"ok": False, "error": str(exc) or repr(exc), "kind": kind}
        proto.write(json.dumps(reply) + "\n")
        proto.flush()
    return 0


def main() -> int:
    # The protocol keeps the real stdout; everything printed by anyone else goes to stderr.
    proto = os.fdopen(os.dup(1), "w")
    os.dup2(2, 1)
    sys.stdout = sys.stderr
    return serve(sys.stdin, proto)


if __name__ == "__main__":
    sys.exit(main())
