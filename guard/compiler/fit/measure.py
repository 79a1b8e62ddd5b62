"""What each rung costs: latency against the unconstrained build, and its output error.

Each distinct plan on the ladder is compiled to native code (the kernel plan and object an
artefact for ``guard run`` stores, made by the same functions, mapped in memory with no
files written: guard.compiler.codegen.build's plan_kernels and jit) and run on the same
seeded inputs. The plans share one memo of packed constants (a rung's plan packs the
weights it shares with the unconstrained build once) and, where their graphs hold the
same constant arrays (the fp32 rungs), one weights blob; with ``cache`` each object is
looked up in, or stored to, guard.compiler.codegen.object_cache (keyed by the kernel
plan, the target and the compiler's sources: a second ladder of the same model emits and
compiles nothing; a plan that differs in one kernel or one offset is another key).
Latency is measured interleaved in one process (A, B, C, A, B, C, ...: a co-tenant slows every plan alike),
after two warm-up calls each, for ``seconds`` in all; the cost of a rung is its median
over the unconstrained build's median, minus 1, in percent. The clock is a parameter
(tests pass a fake one). Outputs are compared with the unconstrained build's: views,
reordering and tiling change no arithmetic, so ``max_abs_err`` is 0 or at rounding level
(a GEMM blocked over fewer rows may sum in another order). An int8 rung states its error
instead (``stated_error``): max abs, max abs over the fp32 output's largest magnitude, and
for a classifier (one output with more than one class) top-1 agreement over
``TOP1_FEEDS`` seeded inputs.
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Callable
from pathlib import Path
from statistics import median
from typing import Any

import numpy as np

from guard.compiler.codegen.build import NativeCode, PackMemo, jit, plan_kernels
from guard.compiler.codegen.llvm_target import codegen_target
from guard.compiler.codegen.module import Generated
from guard.compiler.codegen.object_cache import lookup
from guard.compiler.fit.ladder import Ladder, Step
from guard.compiler.fit.parallel import Compiler, available_cpus, schedule
from guard.compiler.partition.plan import CompiledPlan
from guard.compiler.runtime.weights import pack_weights


def seeded_feeds(p: CompiledPlan, seed: int = 0) -> dict[str, np.ndarray]:
    """Standard-normal inputs (integers: zeros) of the plan's bound shapes."""
    rng = np.random.default_rng(seed)
    out = {}
    for name in p.view.inputs:
        t = p.view.tensors[name]
        dt = np.dtype(t.dtype)
        out[name] = (
            rng.standard_normal(t.shape).astype(dt) if dt.kind == "f" else np.zeros(t.shape, dt)
        )
    return out


TOP1_FEEDS = 8


def stated_error(
    rt: Any, base: Any, feeds: dict[str, np.ndarray], ref: dict[str, np.ndarray]
) -> tuple[float | None, float | None]:
    """(max relative error, top-1 agreement or None) of runtime ``rt`` against ``base``."""
    out = rt.run(feeds)
    rel = max(
        (float(np.max(np.abs(out[k].astype(np.float64) - ref[k])))
         / max(float(np.max(np.abs(ref[k].astype(np.float64)))), 1e-30)
         for k in ref if ref[k].size),
        default=None,
    )  # fmt: skip
    classes = [k for k in ref if np.squeeze(ref[k]).ndim == 1 and ref[k].size > 1]
    if len(ref) != 1 or not classes:
        return rel, None
    k = classes[0]
    agree = 0
    for seed in range(TOP1_FEEDS):
        f = feeds if seed == 0 else {n: _reseeded(v, seed) for n, v in feeds.items()}
        a, b = rt.run(f)[k], base.run(f)[k]
        agree += int(np.argmax(a) == np.argmax(b))
    return rel, agree / TOP1_FEEDS


def _reseeded(v: np.ndarray, seed: int) -> np.ndarray:
    rng = np.random.default_rng(seed)
    return rng.standard_normal(v.shape).astype(v.dtype) if v.dtype.kind == "f" else v


def measure(
    ladder: Ladder,
    *,
    seconds: float = 4.0,
    target: str = "host",
    cache: Path | None = None,
    clock: Callable[[], float] = time.perf_counter,
    only_chosen: bool = False,
    deadline: float | None = None,
) -> Ladder:
    """``ladder`` with ``latency_cost_pct`` and ``max_abs_err`` filled for every rung that
    has a plan (rungs that share a plan share its numbers); with ``only_chosen``, for the
    unconstrained build and the chosen plan only (one build more than the run's own).

    With a ``deadline`` (a ``clock`` reading), the unconstrained build comes first, then
    the chosen plan, then the others by rung, and a plan whose build is estimated to end
    past the deadline (less the timing's ``seconds``) is not built: its rungs keep no
    latency and are listed in ``unmeasured`` (all of them when the deadline is that near
    before anything is built). The estimate scales the unconstrained
    build's time by node count, times ``INT8_BUILD_FACTOR`` for a plan with 8-bit tensors;
    a plan whose object ``cache`` holds costs no compile and is always built (the
    unconstrained build's time then counts the compile its cache entry recorded), so a
    second command measures what the first one compiled, and compiles what it skipped
    while the bound allows. The uncached plans compile side by side on the CPUs this
    process may use (guard.compiler.fit.parallel; one CPU: one after another, each checked
    against the clock): without a deadline each as soon as its kernel plan is made (the
    next plan's packing overlaps it); under a deadline the unconstrained plan compiles
    first, then a list schedule of the others' estimates on those workers decides which
    end in time."""
    base_id = id(ladder.steps[0].plan)
    plans: dict[int, CompiledPlan] = {}
    for s in ladder.steps:
        if s.plan is not None and (
            not only_chosen or s.plan is ladder.chosen or id(s.plan) == base_id
        ):
            plans.setdefault(id(s.plan), s.plan)
    if deadline is not None and clock() + seconds >= deadline:
        # past the bound already (the search and quantising took it): nothing is built
        unbuilt = tuple(s.rung for s in ladder.steps if s.plan is not None)
        return dataclasses.replace(ladder, unmeasured=unbuilt)
    first = [base_id, id(ladder.chosen)]
    order = sorted(plans, key=lambda pid: first.index(pid) if pid in first else 2)
    tgt = codegen_target(target)
    packs: PackMemo = {}
    blobs: dict[tuple[tuple[str, int], ...], tuple[np.ndarray, Any]] = {}
    built: dict[int, tuple[Any, Any, Any, Any]] = {}  # pid: blob, layout, kernel plan, packed
    gens: dict[int, Generated] = {}
    base_prep = 0.0
    skipped: list[int] = []
    with Compiler(tgt, cache, min(available_cpus(), len(order))) as comp:
        for pid in order:
            t = clock()
            consts = {k: c.data for k, c in plans[pid].graph.constants.items()}
            # plans of one graph share its constant arrays (Graph.clone): one blob for them
            wkey = tuple(sorted((k, id(v)) for k, v in consts.items()))
            if wkey not in blobs:
                blobs[wkey] = pack_weights(consts)
            blob, layout = blobs[wkey]
            kplan, packed = plan_kernels(plans[pid], layout, tgt, packs=packs)
            built[pid] = (blob, layout, kplan, packed)
            hit = lookup(kplan, tgt, cache) if cache is not None else None
            if hit is not None:
                gens[pid] = hit
            if pid == base_id:  # what a build costs that compiles: a hit's recorded compile
                base_prep = clock() - t + (hit.compile_s if hit is not None else 0.0)
            if hit is None and deadline is None:
                comp.submit(pid, kplan)  # compiles on a worker while the next plan is planned
        misses = [pid for pid in order if pid not in gens]
        if deadline is None:
            todo = misses
        else:
            base_s = base_prep
            if base_id in misses:
                comp.submit(base_id, built[base_id][2])
                gens[base_id], secs = comp.result(base_id)
                base_s += secs
            rest = [pid for pid in misses if pid != base_id]
            est = {pid: base_s * _weight(plans[pid]) / max(_weight(plans[base_id]), 1.0)
                   for pid in rest}  # fmt: skip
            if comp.workers == 1:  # one after another, each checked against the clock
                todo = []
                for pid in rest:
                    if clock() + est[pid] + seconds > deadline:
                        skipped.append(pid)
                        continue
                    comp.submit(pid, built[pid][2])
                    todo.append(pid)
            else:  # side by side: the estimated end of each on its worker
                todo = schedule(clock(), [(pid, est[pid]) for pid in rest], comp.workers,
                                lambda end: end + seconds <= deadline)  # fmt: skip
                skipped = [pid for pid in rest if pid not in todo]
                for pid in todo:
                    comp.submit(pid, built[pid][2])
        for pid in todo:
            if pid not in gens:
                gens[pid] = comp.result(pid)[0]
    runtimes: dict[int, Any] = {}
    for pid in order:
        if pid in gens:
            blob, layout, kplan, packed = built[pid]
            code = NativeCode(kplan, packed, gens[pid], tgt)
            runtimes[pid] = jit(plans[pid], tgt, code=code, weights=(blob, layout))[0]
    feeds = seeded_feeds(plans[base_id])
    outs = {pid: rt.run(feeds) for pid, rt in runtimes.items()}
    errs = {
        pid: max(
            (
                float(np.max(np.abs(o[k].astype(np.float64) - outs[base_id][k])))
                for k in o
                if o[k].size
            ),
            default=0.0,
        )  # fmt: skip
        for pid, o in outs.items()
    }
    quantised = {id(s.plan) for s in ladder.steps if s.quantised and s.plan is not None}
    stated = {pid: stated_error(runtimes[pid], runtimes[base_id], feeds, outs[base_id])
              for pid in quantised if pid in runtimes}  # fmt: skip
    samples = _interleaved(runtimes, feeds, seconds, clock)
    med = {pid: median(v) for pid, v in samples.items()}
    cost = {pid: 100.0 * (med[pid] / med[base_id] - 1.0) for pid in med}

    def fill(s: Step) -> Step:
        if s.plan is None or id(s.plan) not in cost:
            return s
        pid = id(s.plan)
        rel, top1 = stated.get(pid, (None, None))
        return dataclasses.replace(s, latency_cost_pct=round(cost[pid], 2), max_abs_err=errs[pid],
                                   max_rel_err=rel, top1_agreement=top1)  # fmt: skip

    unmeasured = tuple(s.rung for s in ladder.steps if s.plan is not None and id(s.plan) in skipped)
    return dataclasses.replace(
        ladder, steps=tuple(fill(s) for s in ladder.steps), unmeasured=unmeasured
    )


INT8_BUILD_FACTOR = 5.0  # DenseNet-121: the int8 build's code generation 81 s, fp32's 17 s


def _weight(p: CompiledPlan) -> float:
    """A plan's estimated build cost, relative: its nodes (integer kernels weigh more)."""
    eight = any(t.dtype in ("uint8", "int8") for t in p.view.tensors.values())
    return len(p.view.nodes) * (INT8_BUILD_FACTOR if eight else 1.0)


def _interleaved(
    runtimes: dict[int, Any],
    feeds: dict[str, np.ndarray],
    seconds: float,
    clock: Callable[[], float],
) -> dict[int, list[float]]:
    for rt in runtimes.values():  # warm-up: first-touch pages, caches
        rt.run(feeds)
        rt.run(feeds)
    samples: dict[int, list[float]] = {pid: [] for pid in runtimes}
    ids = list(runtimes)
    end = clock() + seconds
    r = 0
    while r < 3 or clock() < end:
        for k in range(len(ids)):
            pid = ids[(k + r) % len(ids)]  # rotate who goes first
            t = clock()
            runtimes[pid].run(feeds)
            samples[pid].append(clock() - t)
        r += 1
    return samples
