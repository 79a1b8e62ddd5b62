"""Where a result's measurement rounds run: each in a forked child, or all in this process.

guard.bench.timer explains why (a round spread that holds more of the
process-to-process spread, and what it still cannot hold). A round in a child loads its own session from the artefact, warms it up, runs
its timed loop and sends its ``Timings`` back over guard.isolate's pipe; a child that
crashes or hangs fails that result as any isolated step does. Rounds run in this process
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


def isolated_rounds(cfg: MeasureConfig, model: str, backend: str, where: str) -> RoundRunner:
    """A ``measure_rounds`` runner that runs round i's job in a forked child."""
    per = cfg.per_round()
    limit = ROUND_TIMEOUT_S + 4 * (per.warmup_s + per.max_time_s)

    def run(i: int, job: Callable[[], Timings]) -> Timings:
        return run_isolated(
            job,
            what=f"round {i + 1} of {cfg.rounds} of {model} on {backend}",
            where=where,
            timeout_s=limit,
        )

    return run
