"""Facts about the machine that decide whether latency numbers can be trusted.

Recorded with every result: load average, CPU frequency governor, CPU affinity, core
count, threads requested, and the other processes' CPU use during the timed loop
(``contention``). Each fact that makes numbers untrustworthy adds a one-line warning.

Files are read under an injectable ``root`` so tests use a fake /proc and /sys. On a VM
there is usually no cpufreq directory: the governor is then recorded as null, which is
"unknown", not "bad", and does not warn.

Contention: /proc/stat's first line is the CPU time of every core since boot. Over the
timed loop, (all busy time - this process's own CPU time) / (all CPU time - own) is the
fraction of the capacity not used by us that other processes used. On the 2-core CI
machine another process on the other core moves 1-thread medians by -17%..+28%
(FACTS.md, "Noise"), so above CONTENTION_WARN the run is flagged.
"""

from __future__ import annotations

import os
import resource
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, NotRequired, TypedDict

from guard.core.errors import UsageError
from guard.results.result import Contention

# Fraction of the other cores' capacity used by other processes above which a run is
# flagged. 0.2 is one core a fifth busy on a 2-core machine: enough to shift medians.
CONTENTION_WARN = 0.2

THREAD_ENV_VARS = ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS")


@dataclass(frozen=True)
class CpuTimes:
    """One reading of system-wide and own CPU time, in seconds."""

    busy_s: float  # all cores, all processes, not idle/iowait
    total_s: float  # all cores, busy + idle + iowait
    own_s: float  # this process (all its threads), user + system
    wall_s: float = 0.0  # a monotonic clock at the reading (for this process's share)
    switches: int | None = None  # involuntary context switches of this process so far


def read_cpu_times(root: Path = Path("/")) -> CpuTimes | None:
    """Read /proc/stat and this process's CPU time; None where /proc/stat is unreadable."""
    try:
        first = (root / "proc" / "stat").read_text().splitlines()[0].split()
    except (OSError, IndexError):
        return None
    if not first or first[0] != "cpu" or len(first) < 5:
        return None
    try:
        fields = [int(x) for x in first[1:]]
    except ValueError:
        return None
    # user nice system idle iowait irq softirq steal [guest guest_nice]; guest time is
    # already counted in user/nice, so it is not added again.
    fields += [0] * (8 - len(fields))
    user, nice, system, idle, iowait, irq, softirq, steal = fields[:8]
    tick = float(os.sysconf("SC_CLK_TCK"))
    busy = user + nice + system + irq + softirq + steal
    switches = resource.getrusage(resource.RUSAGE_SELF).ru_nivcsw
    return CpuTimes(
        busy_s=busy / tick,
        total_s=(busy + idle + iowait) / tick,
        # CLOCK_PROCESS_CPUTIME_ID (nanoseconds), not os.times' 100 Hz ticks: a round's
        # CPU time per call is judged when its wall time was preempted (guard.stats.regress).
        own_s=time.process_time(),
        wall_s=time.monotonic(),
        switches=int(switches),
    )


def contention_between(before: CpuTimes | None, after: CpuTimes | None) -> float | None:
    """Fraction of the capacity we did not use that other processes used; None if unknown."""
    if before is None or after is None:
        return None
    own = after.own_s - before.own_s
    others_busy = (after.busy_s - before.busy_s) - own
    others_capacity = (after.total_s - before.total_s) - own
    # /proc/stat ticks at 100 Hz: a loop shorter than a few ticks says nothing.
    if others_capacity <= 0.05:
        return None
    return min(1.0, max(0.0, others_busy / others_capacity))


def cpu_share_between(before: CpuTimes | None, after: CpuTimes | None) -> float | None:
    """This process's CPU time over the wall time between two readings; None if unknown.

    A single-threaded loop that is never preempted reads ~1.0; one that shared its core
    with another process reads ~0.5, and its samples include the time it waited.
    """
    if before is None or after is None:
        return None
    wall = after.wall_s - before.wall_s
    # /proc/stat ticks at 100 Hz: a loop shorter than a few ticks says nothing.
    if wall <= 0.05 or before.wall_s <= 0:
        return None
    return max(0.0, (after.own_s - before.own_s) / wall)


def preemptions_between(before: CpuTimes | None, after: CpuTimes | None) -> int | None:
    """Involuntary context switches of this process between two readings; None if unknown."""
    if before is None or after is None or before.switches is None or after.switches is None:
        return None
    return max(0, after.switches - before.switches)


# Below this share of a core, the process was preempted: samples hold time it spent waiting
# for a CPU, not time the model took. (A multi-threaded loop reads more than 1.0 when it
# gets its cores, so the bound is on at least one core's worth.)
CPU_SHARE_WARN = 0.9


def cpu_share_warning(share: float | None) -> str | None:
    """The warning for a loop that did not get a whole core, or None."""
    if share is None or share >= CPU_SHARE_WARN:
        return None
    return (
        f"this process got {share:.0%} of a core during the timed loop (< "
        f"{CPU_SHARE_WARN:.0%}): it was preempted and its samples include waiting; re-run "
        "on a quiet machine"
    )


def contention_warning(contention: float | None) -> str | None:
    """The warning for a contended run, or None."""
    if contention is None or contention <= CONTENTION_WARN:
        return None
    return (
        f"other processes used {contention:.0%} of the spare CPU during the timed loop "
        f"(> {CONTENTION_WARN:.0%}): latencies may be off by 2x; re-run on a quiet machine"
    )


def round_contended(contention: float | None, cpu_share: float | None) -> bool:
    """Whether a round was measured under contention: others took more than CONTENTION_WARN
    of the spare CPU, or this process got less than CPU_SHARE_WARN of a core."""
    return contention_warning(contention) is not None or cpu_share_warning(cpu_share) is not None


def contention_block(rounds: Sequence[Any]) -> Contention:
    """A result's ``contention`` block from its rounds (anything with ``contention`` and
    ``cpu_share``): ``flagged`` when any round was contended, with how many and the worst;
    read from the JSON the result writes (every key, nulls included, in this order).

    A latency bound missed by a flagged result is inconclusive, not failed (guard.results.
    checks), and the dashboard's change points leave flagged runs out.
    """
    loads = [r.contention for r in rounds if r.contention is not None]
    shares = [r.cpu_share for r in rounds if r.cpu_share is not None]
    flagged = sum(round_contended(r.contention, r.cpu_share) for r in rounds)
    return Contention.from_json(
        {
            "flagged": flagged > 0,
            "rounds_flagged": flagged,
            "rounds": len(rounds),
            "load_max": max(loads) if loads else None,
            "cpu_share_min": min(shares) if shares else None,
            "load_threshold": CONTENTION_WARN,
            "cpu_share_threshold": CPU_SHARE_WARN,
        }
    )


def contention_text(block: Contention) -> str:
    """``4 of 10 rounds contended: others used up to 63% of the spare CPU, this process got
    as little as 55% of a core``: what a flagged result's messages say."""
    parts = [f"{block.rounds_flagged} of {block.rounds} rounds contended"]
    load, share = block.load_max, block.cpu_share_min
    detail = []
    if isinstance(load, int | float) and load > CONTENTION_WARN:
        detail.append(f"others used up to {load:.0%} of the spare CPU")
    if isinstance(share, int | float) and share < CPU_SHARE_WARN:
        detail.append(f"this process got as little as {share:.0%} of a core")
    return parts[0] + (": " + ", ".join(detail) if detail else "")


def set_threads(n: int) -> dict[str, str | None]:
    """Fix intra-op threads for child libraries (OpenMP, OpenBLAS, MKL) via the environment.

    Must run before those libraries start their thread pools; backends also set their own
    session threads. Returns the previous values so a caller can restore them.
    """
    if isinstance(n, bool) or not isinstance(n, int) or n < 1:
        raise UsageError(
            f"threads must be a positive integer, got {n!r}",
            where="threads",
            hint="set threads: 1 (or the core count) in the suite.",
        )
    previous = {k: os.environ.get(k) for k in THREAD_ENV_VARS}
    for k in THREAD_ENV_VARS:
        os.environ[k] = str(n)
    return previous


def _read(path: Path) -> str | None:
    try:
        return path.read_text().strip()
    except OSError:
        return None


def _loadavg(root: Path) -> list[float] | None:
    text = _read(root / "proc" / "loadavg")
    if text is None:
        return None
    try:
        values = [float(x) for x in text.split()[:3]]
    except ValueError:
        return None
    return values if len(values) == 3 else None


# The 1, 5 and 15 minute load averages.
LoadAvg = TypedDict("LoadAvg", {"1": float, "5": float, "15": float})


class PreflightBefore(TypedDict):
    """What the preflight before the rounds saw, kept in the one after them."""

    loadavg: LoadAvg | None
    warnings: list[str]


class Preflight(TypedDict):
    """A result's ``preflight`` block (``preflight``'s docstring)."""

    loadavg: LoadAvg | None
    governor: dict[str, str | None]
    affinity: list[int]
    cores: int
    threads: int
    contention: float | None
    warnings: list[str]
    before: NotRequired[PreflightBefore]  # the preflight after the rounds only


def _governors(root: Path, cpus: Iterable[int]) -> dict[str, str | None]:
    base = root / "sys" / "devices" / "system" / "cpu"
    return {str(c): _read(base / f"cpu{c}" / "cpufreq" / "scaling_governor") for c in sorted(cpus)}


def preflight(
    threads: int,
    *,
    contention: float | None = None,
    root: Path = Path("/"),
    affinity: Callable[[], set[int]] | None = None,
    cpu_count: Callable[[], int | None] | None = None,
) -> Preflight:
    """Machine facts recorded with a result, and warnings where they spoil the numbers.

    Keys: loadavg {"1", "5", "15"} (or null), governor {cpu: name or null} over the CPUs
    this process may run on, affinity (sorted CPU ids), cores, threads, contention, and
    warnings (one line each). Call it again after ``measure`` with ``contention=`` to add
    the contention fact and its warning.
    """
    aff = sorted((affinity or (lambda: os.sched_getaffinity(0)))())
    cores = (cpu_count or os.cpu_count)() or len(aff)
    load = _loadavg(root)
    gov = _governors(root, aff)
    warnings: list[str] = []
    if load is not None and load[0] > cores - 0.5:
        warnings.append(
            f"load average {load[0]:.2f} exceeds {cores} cores - 0.5: other work competes "
            "for the CPU; latencies are not trustworthy"
        )
    slow = sorted((c for c, g in gov.items() if g is not None and g != "performance"), key=int)
    if slow:
        names = sorted({gov[c] or "" for c in slow})
        warnings.append(
            f"CPU frequency governor is {'/'.join(names)} (not performance) on CPUs "
            f"{','.join(slow)}: clocks ramp during the run; set the performance governor"
        )
    if threads > len(aff):
        warnings.append(
            f"threads={threads} exceeds the {len(aff)} CPUs this process may run on "
            f"(affinity {aff}): threads will time-share; lower threads"
        )
    cw = contention_warning(contention)
    if cw:
        warnings.append(cw)
    return {
        "loadavg": None if load is None else {"1": load[0], "5": load[1], "15": load[2]},
        "governor": gov,
        "affinity": aff,
        "cores": cores,
        "threads": threads,
        "contention": contention,
        "warnings": warnings,
    }
