"""Compile a ladder's uncached kernel plans side by side in worker processes.

LLVM at O3 on each distinct plan is most of a cold ``guard fit``; the plans are
independent, so with more than one CPU available to this process (os.sched_getaffinity)
:class:`Compiler` runs :func:`guard.compiler.codegen.object_cache.code_for` (emit,
compile, store in the object cache) for each in a worker of a spawned process pool, one
worker a CPU. The worker calls the function the serial path calls, under the key this
process made (a kernel plan unpickled there pickles to other bytes), so the object and
the cache entry are the same bytes. A GuardError raised in a worker is raised here as the
same class with the same message and fields; a worker that dies (a crash, killed for
memory) is an InternalError. Workers ignore SIGINT; leaving the ``with`` block by any
exception (a KeyboardInterrupt included) terminates them, so none outlives the command.
With one worker, or under a tuning dispatch (its schedules live in this process only),
nothing is spawned and :meth:`Compiler.submit` compiles in place.
"""

from __future__ import annotations

import multiprocessing
import os
import signal
import time
from collections.abc import Callable
from concurrent.futures import Future, ProcessPoolExecutor
from concurrent.futures.process import BrokenProcessPool
from pathlib import Path
from types import TracebackType
from typing import Any

from guard.compiler.codegen.kernel_plan import KernelPlan
from guard.compiler.codegen.llvm_target import CodegenTarget
from guard.compiler.codegen.module import Generated
from guard.compiler.codegen.object_cache import code_for, key_parts, plan_key
from guard.compiler.tuning.dispatch import active
from guard.core.errors import GuardError, InternalError


def available_cpus() -> int:
    """The CPUs this process may run on (its affinity mask), at least 1."""
    try:
        return max(len(os.sched_getaffinity(0)), 1)
    except AttributeError:  # no affinity call on this platform
        return max(os.cpu_count() or 1, 1)


def _quiet() -> None:
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # the parent handles Ctrl-C and ends us


def _compile(
    kplan: KernelPlan, target: CodegenTarget, root: Path | None, key: str | None
) -> tuple[Any, ...]:
    t0 = time.perf_counter()
    try:
        gen = code_for(kplan, target, root, key)
    except GuardError as exc:  # rebuilt in the parent with its fields (where, hint)
        return ("error", type(exc), exc.args, dict(vars(exc)))
    return ("ok", gen, time.perf_counter() - t0)


class Compiler:
    """``submit`` kernel plans, then ``result`` each: its Generated and the seconds its
    emitting and compiling took (in the worker, or here with one worker)."""

    def __init__(self, target: CodegenTarget, root: Path | None, workers: int) -> None:
        self.target = target
        self.root = root
        self.workers = 1 if active() is not None else max(workers, 1)
        self._pool: ProcessPoolExecutor | None = None
        self._jobs: dict[int, tuple[Any, ...] | Future[tuple[Any, ...]]] = {}

    def __enter__(self) -> Compiler:
        if self.workers > 1:
            ctx = multiprocessing.get_context("spawn")
            self._pool = ProcessPoolExecutor(self.workers, mp_context=ctx, initializer=_quiet)
        return self

    def __exit__(
        self,
        kind: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        pool, self._pool = self._pool, None
        if pool is None:
            return
        procs = list(pool._processes.values()) if kind is not None else []
        pool.shutdown(wait=kind is None, cancel_futures=True)
        for p in procs:  # a compile still running is not waited for
            p.terminate()
        for p in procs:
            p.join()

    def submit(self, job: int, kplan: KernelPlan) -> None:
        if self._pool is None:
            self._jobs[job] = _compile(kplan, self.target, self.root, None)
            return
        key = None if self.root is None else plan_key(kplan, key_parts(self.target))
        self._jobs[job] = self._pool.submit(_compile, kplan, self.target, self.root, key)

    def result(self, job: int) -> tuple[Generated, float]:
        out = self._jobs.pop(job)
        try:
            got = out.result() if isinstance(out, Future) else out
        except BrokenProcessPool as exc:
            raise InternalError(f"a code generation worker process died: {exc}") from exc
        if got[0] == "error":
            _, cls, args, fields = got
            err = cls.__new__(cls)
            err.args = args
            err.__dict__.update(fields)
            raise err
        return got[1], got[2]


def schedule(
    now: float, estimates: list[tuple[int, float]], workers: int, fits: Callable[[float], bool]
) -> list[int]:
    """The jobs of ``estimates`` (job, estimated seconds), in order, that a list schedule on
    ``workers`` parallel workers from ``now`` finishes at a time ``fits`` accepts; a job
    that does not fit is left out and the next is tried."""
    free = [now] * max(workers, 1)
    taken = []
    for job, est in estimates:
        w = min(range(len(free)), key=free.__getitem__)
        if fits(free[w] + est):
            free[w] += est
            taken.append(job)
    return taken
