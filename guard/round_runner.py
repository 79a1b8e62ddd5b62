"""Where a result's measurement rounds run: each in a forked child, or all in this process.

guard.bench.timer explains why (a round spread that holds more of the
process-to-process spread, and what it still cannot hold). A round in a child loads its own session from the artefact, warms it up, runs
its timed loop and sends its ``Timings`` back over guard.isolate's pipe; a child that
crashes or hangs fails that result as any isolated step does. The child is pinned to the
first ``threads`` cores (``measuring_cpus``), so every run measures on the same ones. Rounds run in this process
when isolation is switched off (``GUARD_NO_ISOLATE=1``, for a debugger or a profiler),
where the platform has no ``fork``, and for a backend whose runtime is not fork-safe
(``Backend.fork_safe_rounds``); the results file says which (``round_isolation``).
"""

from __future__ import annotations

import os
from collections.abc import Callable

from guard.backends import get_backend
from guard.bench import MeasureConfig
from guard.bench.timer import RoundRunner, Timings
from guard.isolate import ENV_DISABLE, run_isolated

PROCESS = "process"
SESSION = "session"

# A round's child gets this long to load its session, plus four times its loop budget.
ROUND_TIMEOUT_S = 120.0


def round_isolation(backend_name: str) -> str:
    """``"process"`` (each round in a forked child) or ``"session"`` (in this process)."""
    if os.environ.get(ENV_DISABLE) or not hasattr(os, "fork"):
        return SESSION
    return PROCESS if getattr(get_backend(backend_name), "fork_safe_rounds", True) else SESSION


def measuring_cpus(threads: int) -> set[int] | None:
    """The cores a measurement is pinned to: the first ``threads`` this process may use.

    On a 2-vCPU runner the two cores can differ by 5-20% for minutes (a busy sibling
    thread on the host, another clock), so a process that the scheduler happened to keep
    on the slower one reads as a regression. Pinned, every round of every run (and both
    workers of ``guard ab --base-ref``) measures on the same cores. None where affinity
    cannot be set.
    """
    if not hasattr(os, "sched_getaffinity"):
        return None
    allowed = sorted(os.sched_getaffinity(0))
    return set(allowed[: max(1, threads)]) if allowed else None


def isolated_rounds(
    cfg: MeasureConfig, model: str, backend: str, where: str, threads: int = 1
) -> RoundRunner:
    """A ``measure_rounds`` runner that runs round i's job in a forked child, pinned to
    ``measuring_cpus(threads)``."""
    per = cfg.per_round()
    limit = ROUND_TIMEOUT_S + 4 * (per.warmup_s + per.max_time_s)
    cpus = measuring_cpus(threads)

    def pinned(job: Callable[[], Timings]) -> Timings:
        if cpus:
            os.sched_setaffinity(0, cpus)
        return job()

    def run(i: int, job: Callable[[], Timings]) -> Timings:
        return run_isolated(
            pinned,
            job,
            what=f"round {i + 1} of {cfg.rounds} of {model} on {backend}",
            where=where,
            timeout_s=limit,
        )

    return run
