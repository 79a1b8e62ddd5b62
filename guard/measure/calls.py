"""The calling primitives every timing loop shares: warm up for a while, batch calls.

guard.measure.timer's loop (per-call samples of one result's rounds) and guard ab's
interleaved pairs (guard.experiment.ab) warm up with :func:`warm_up` and guard ab batches
calls with :func:`choose_inner`. guard.experiment.ab_worker keeps its own copy of both on
purpose: it runs under the other ref's source tree (``guard ab --base-ref``), which may
predate this module, so it imports nothing from guard.
The loops themselves stay apart because they measure different things: per-call samples
with host-speed probes (results files), adjacent pairs in alternating order (A/B), A/A
blocks (guard.stats.calibrate) and interleaved candidate rounds (guard.compiler.tuning).
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable

Clock = Callable[[], float]


def warm_up(
    fn: Callable[[], object],
    seconds: float,
    clock: Clock = time.perf_counter,
    *,
    min_calls: int = 0,
    max_calls: float = math.inf,
) -> int:
    """Call ``fn`` while less than ``seconds`` has passed (at least ``min_calls``, at most
    ``max_calls`` times); returns the number of calls. The calls are discarded: they pay
    for lazy initialisation, allocator growth, JIT and cold caches."""
    n, start = 0, clock()
    while n < max_calls and (n < min_calls or clock() - start < seconds):
        fn()
        n += 1
    return n


def choose_inner(
    fn: Callable[[], object],
    min_sample_s: float,
    clock: Clock = time.perf_counter,
    cap: int = 10_000,
) -> int:
    """Calls per sample so that one sample lasts at least ``min_sample_s`` (doubling search)."""
    inner = 1
    while inner < cap:
        t0 = clock()
        for _ in range(inner):
            fn()
        if clock() - t0 >= min_sample_s:
            break
        inner *= 2
    return min(inner, cap)
