"""Where measurement rounds run: each in a round worker of its own, or all in this process.

guard.measure.timer explains why a result is measured in rounds and why the rounds must
differ the way two processes do. A round worker (guard.measure.round_worker) is a fresh
interpreter, not a fork: its own address-space layout, libraries mapped at their own
addresses, its own heap history. ``RoundWorkers`` keeps up to ``count`` of them for a
run and gives round ``i`` of every result to worker ``i % count``, so with the default of
one worker per round no two rounds of a result share a process, and what a whole
process carries (placement, alignment, a bad start) lands in the round spread the
comparison leans on instead of in the estimate. guard.run.runner also interleaves the rounds
of all results (round 1 of every result, then round 2, ...), so each result's rounds
span the run and a disturbance of a few seconds touches one round of many results, not
every round of one.

A worker gets the request, loads its own session from the artefact, warms it up, times
its loop pinned to the first ``threads`` cores (``measuring_cpus``) and sends the round's
``Timings`` back. A worker that crashes or hangs fails that result, naming the round
("round 2 of 10 of m on onnxruntime ... SIGSEGV"); the next round gets a new worker.
Rounds run in this process (``SESSION``) when isolation is switched off
(``GUARD_NO_ISOLATE=1``, for a debugger or a profiler) and when the run was given its own
clock (a test's fake clock cannot cross into another process); the results file says
which (``measurement.round_isolation``).
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass
from multiprocessing.connection import Connection
from pathlib import Path
from typing import TYPE_CHECKING, Any

import guard
from guard.core.errors import InternalError, UsageError
from guard.core.isolate import (
    ENV_DISABLE,
    NativeCrashError,
    StepTimeoutError,
    signal_name,
    unpacked,
)
from guard.manifest.written import ManifestJson
from guard.measure import MeasureConfig
from guard.measure.preflight import THREAD_ENV_VARS
from guard.measure.round_worker import RoundRequest
from guard.measure.timer import Timings

if TYPE_CHECKING:  # numpy itself is imported by the workers, not here
    import numpy as np

WORKER = "worker"
SESSION = "session"

# A round gets this long to load its session, plus four times its loop budget; a new
# worker this long more to start its interpreter.
ROUND_TIMEOUT_S = 120.0
START_TIMEOUT_S = 120.0
# Workers a run keeps by default: one per round of the default 10 rounds.
DEFAULT_WORKERS = 10
ENV_WORKERS = "GUARD_ROUND_WORKERS"


def round_isolation(clock_injected: bool = False) -> str:
    """``"worker"`` (each round in a round worker) or ``"session"`` (in this process)."""
    if os.environ.get(ENV_DISABLE) or clock_injected or not hasattr(os, "pipe"):
        return SESSION
    return WORKER


def worker_count(rounds: int) -> int:
    """How many round workers a run keeps: ``GUARD_ROUND_WORKERS``, else one per round."""
    raw = os.environ.get(ENV_WORKERS)
    if raw is None or raw == "":
        return max(1, min(rounds, DEFAULT_WORKERS))
    try:
        n = int(raw)
    except ValueError:
        n = 0
    if n < 1:
        raise UsageError(
            f"{ENV_WORKERS} must be a positive integer, got {raw!r}",
            where=ENV_WORKERS,
            hint=f"unset it (one worker per round, at most {DEFAULT_WORKERS}) or set e.g. 4.",
        )
    return n


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


@dataclass
class _Worker:
    proc: subprocess.Popen[bytes]
    inbox: Connection  # replies from the worker
    outbox: Connection  # requests to the worker
    ready: bool = False

    def end(self, wait_s: float = 0.0) -> int:
        """Close the pipes, wait up to ``wait_s`` for the exit, then kill: the exit status."""
        for conn in (self.inbox, self.outbox):
            conn.close()
        try:
            return self.proc.wait(timeout=wait_s)
        except subprocess.TimeoutExpired:
            try:
                os.killpg(self.proc.pid, signal.SIGKILL)  # not reaped yet: still its group
            except (ProcessLookupError, PermissionError):
                pass
            return self.proc.wait()


@dataclass(frozen=True)
class RoundJob:
    """What a round worker needs to measure one round of one result."""

    model: str
    backend: str
    where: str
    artefact: Path
    manifest: ManifestJson  # the manifest as the worker reads it (JSON, over the pipe)
    threads: int
    feeds: dict[str, np.ndarray]
    config: MeasureConfig  # the whole result's; each round runs ``config.per_round()``


class RoundWorkers:
    """Up to ``count`` round workers per thread count; round ``i`` goes to worker ``i % count``.

    A worker serves one thread count (its OpenMP/BLAS environment is fixed at start).
    ``start`` launches workers ahead of use, so their interpreters start while the run is
    still building; ``close`` (or leaving the ``with``) ends them all.
    """

    def __init__(self, count: int, backends: Sequence[str] = ()) -> None:
        self.count = max(1, int(count))
        self.backends = tuple(dict.fromkeys(backends))
        self._workers: dict[tuple[int, int], _Worker] = {}

    def __enter__(self) -> RoundWorkers:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def start(self, threads: Sequence[int]) -> None:
        for t in dict.fromkeys(threads):
            for k in range(self.count):
                self._get(k, t)

    def wait_ready(self, timeout_s: float = START_TIMEOUT_S) -> None:
        """Wait until every started worker has its interpreter up (at most ``timeout_s``).

        Ten interpreters importing their backends keep both cores of a small runner busy
        for seconds: the first rounds must not be measured beside that. A worker that is
        not up in time is left to its first round (whose limit allows for the start).
        """
        end = time.monotonic() + timeout_s
        for w in list(self._workers.values()):
            while not w.ready:
                try:
                    if not w.inbox.poll(max(0.0, end - time.monotonic())):
                        return
                    reply = w.inbox.recv()
                except (EOFError, OSError):
                    break  # it died starting: its first round says so
                if reply[0] == "ready":
                    w.ready = True

    def _spawn(self, threads: int) -> _Worker:
        to_child_r, to_child_w = os.pipe()
        to_parent_r, to_parent_w = os.pipe()
        env = dict(os.environ)
        env.update({k: str(threads) for k in THREAD_ENV_VARS})
        root = str(Path(guard.__file__).resolve().parent.parent)  # this guard, not another
        env["PYTHONPATH"] = os.pathsep.join(p for p in (root, env.get("PYTHONPATH")) if p)
        try:
            proc = subprocess.Popen(
                [sys.executable, "-m", "guard.measure.round_worker", str(to_child_r), str(to_parent_w),
                 *self.backends],
                stdin=subprocess.DEVNULL,
                stdout=sys.stderr.fileno() if _has_fileno(sys.stderr) else None,
                env=env,
                pass_fds=(to_child_r, to_parent_w),
                start_new_session=True,  # a Ctrl-C reaches guard, which ends its workers
            )  # fmt: skip
        except BaseException:
            os.close(to_parent_r)
            os.close(to_child_w)
            raise
        finally:
            os.close(to_child_r)
            os.close(to_parent_w)
        return _Worker(proc, Connection(to_parent_r, writable=False),
                       Connection(to_child_w, readable=False))  # fmt: skip

    def _get(self, k: int, threads: int) -> _Worker:
        key = (k % self.count, threads)
        if key not in self._workers:
            self._workers[key] = self._spawn(threads)
        return self._workers[key]

    def _drop(self, k: int, threads: int, wait_s: float = 0.0) -> int:
        """End and forget a worker; its exit status (negative: the signal that ended it)."""
        return self._workers.pop((k % self.count, threads)).end(wait_s)

    def measure(self, i: int, job: RoundJob, clock: Any = time.monotonic) -> Timings:
        """Round ``i`` of ``job``'s result, measured in worker ``i % count``."""
        per = job.config.per_round()
        what = f"round {i + 1} of {job.config.rounds} of {job.model} on {job.backend}"
        limit = ROUND_TIMEOUT_S + 4 * (per.warmup_s + per.max_time_s)
        w = self._get(i, job.threads)
        cpus = measuring_cpus(job.threads)
        request: RoundRequest = {
            "backend": job.backend,
            "artefact": str(job.artefact),
            "manifest": job.manifest,
            "threads": job.threads,
            "feeds": job.feeds,
            "config": per,
            "cpus": sorted(cpus) if cpus else None,
        }
        deadline = clock() + limit + (0.0 if w.ready else START_TIMEOUT_S)
        try:
            w.outbox.send(request)
            while True:
                if not w.inbox.poll(max(0.0, deadline - clock())):
                    self._drop(i, job.threads)
                    raise StepTimeoutError(
                        f"{what} ran past its time limit of {limit:g} s and was stopped",
                        where=job.where,
                        hint="Lower measure.max_time_s, or check the model with "
                        "`guard doctor`: a round that never ends is a hang in its runtime.",
                    )
                reply = w.inbox.recv()
                if reply[0] != "ready":
                    break
                w.ready = True
        except (EOFError, OSError):
            code = self._drop(i, job.threads, wait_s=5.0)
            if code < 0:
                raise NativeCrashError(
                    f"{what} crashed: killed by {signal_name(-code)} in native code "
                    "(onnxruntime, tvm or a generated kernel); the other models are unaffected",
                    where=job.where,
                    hint="Run the model alone with `guard doctor` to find the node, and "
                    "report it upstream with the model.",
                ) from None
            raise InternalError(
                f"{what}: its round worker ended without a result (exit status {code})",
                where=job.where,
            ) from None
        timings: Timings = unpacked(
            reply, what, where=job.where, origin=f"round worker {w.proc.pid}", prefix=True
        )
        return timings

    def close(self) -> None:
        workers, self._workers = list(self._workers.values()), {}
        for w in workers:
            try:
                w.outbox.send(None)
            except OSError:
                pass
        end = time.monotonic() + 5.0
        for w in workers:
            w.end(max(0.0, end - time.monotonic()))


def _has_fileno(stream: Any) -> bool:
    try:
        stream.fileno()
    except (AttributeError, OSError, ValueError):
        return False
    return True
