"""Tuning the bundled compiler: extract tasks, spend a budget by estimated gain, measure.

1. **Tasks** (:func:`extract_tasks`): the model is imported, optimised and planned
   exactly as the bundled build does it, and the kernel plan is built (no LLVM
   compilation); every GEMM and direct-convolution step becomes a task keyed by op, full
   shape signature, dtype, canonical target and compiler version (keys.py), the key the
   emitter will look up at build. Steps with one key are one task, with their count.
2. **Budget** (:func:`allocate`): each task's share of the model's FLOPs (count x FLOPs)
   is its estimated share of runtime, and so of what tuning can gain; the wall-clock
   budget is split in that proportion. A task below ``MIN_SHARE`` of the FLOPs gets only
   the floor: its default and the cost model's first choice, measured briefly.
3. **Candidates** (:func:`gemm_candidates`, :func:`conv_candidates`): the schedule space
   (GEMM: micro-tile, k-chunk, loop order; convolution: output columns and
   output-channel vectors per tile, unroll, loop order) is pruned analytically: tiles
   that spill the register file are dropped, the rest ranked by a cost model (padding
   waste of the tile against the shape, FMAs per load, independent FMA chains, k-chunks
   that leave L1). The default schedule is always measured. ``use_blas`` is not
   searched: it binds the artefact to numpy's bundled ILP64 OpenBLAS symbol in the
   running process (absent where numpy links another BLAS, and in the static harness of
   emulated runs), with a thread pool outside the session's thread count.
4. **Measurement** (:func:`measure`): each candidate is compiled alone (the emitter's own
   code, the schedule forced through the dispatch context) for the canonical target and
   timed in this process on one thread, by this thread's CPU time (a co-tenant that
   preempts us is not counted; wall time would be): warm-up calls discarded, ``reps`` rounds
   that visit every candidate once each (interleaved, so a noisy neighbour slows all
   candidates alike), each round long enough for the clock. The fastest median wins only
   if it beats the default's by more than ``MARGIN`` and in ``PAIRED_WINS`` of the rounds;
   otherwise the default is kept as the entry's schedule (an entry still: a hit, with the
   measured times).

Targets that cannot run here (another architecture, or features this CPU lacks) are
refused: a schedule is only as good as the machine it was measured on.
"""

from __future__ import annotations

import ctypes
import math
import statistics
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

import llvmlite.ir as ir
import numpy as np

from guard.compiler import import_onnx, optimize, verify
from guard.compiler.codegen.base import Kernel
from guard.compiler.codegen.conv.schedule import (
    Geometry,
    conv_space,
    default_conv_schedule,
    row_cost,
)
from guard.compiler.codegen.emitters import emitter_for
from guard.compiler.codegen.gemm.emitter import GemmShape
from guard.compiler.codegen.gemm.schedule import GemmSchedule, default_gemm_schedule
from guard.compiler.codegen.irutil import PTR, VOID
from guard.compiler.codegen.kernel_plan import build_kernel_plan
from guard.compiler.codegen.llvm_target import codegen_target
from guard.compiler.codegen.module import LoadedObject, compile_module
from guard.compiler.codegen.split import split_step
from guard.compiler.ir.isa_table import active_table
from guard.compiler.partition.plan import plan
from guard.compiler.runtime.weights import pack_weights
from guard.compiler.tuning import schedule_json as sch
from guard.compiler.tuning.cache import Entry
from guard.compiler.tuning.dispatch import Dispatch, applied, conv_shape, gemm_shape
from guard.compiler.tuning.keys import TaskKey

GEMM_OPS = frozenset({"Gemm", "FusedGemm", "MatMul", "FusedMatMul"})
CONV_OPS = frozenset({"Conv", "FusedConv"})
MIN_SHARE = 0.02  # below this share of the FLOPs a task gets only the floor
MARGIN = 0.03  # a candidate must beat the default's median by this to replace it
PAIRED_WINS = 0.75  # ... and be faster than it in this share of the interleaved rounds
WARMUP_ROUNDS = 2
MIN_ROUND_S = 0.002


@dataclass
class Task:
    key: TaskKey
    kernel: Any  # guard.compiler.codegen.base.Kernel of the first step with this key
    count: int
    flops: int  # of one step
    default: Any
    shape: Any = None  # GemmShape or conv Geometry
    # A row task of a split GEMM reads B packed for the whole GEMM: its panel width
    # (``nr``) is fixed to the packed one (guard.compiler.codegen.split.gemm_tasks).
    packed_nr: int | None = None

    @property
    def total_flops(self) -> int:
        return self.count * self.flops


@dataclass
class Measured:
    schedule: Any
    samples: list[float] = field(default_factory=list)  # seconds per call, one per round
    compile_s: float = 0.0

    @property
    def median(self) -> float:
        return statistics.median(self.samples) if self.samples else math.inf


# -- tasks --------------------------------------------------------------------------------


def extract_tasks(
    model_path: Any, input_shapes: Mapping[str, Sequence[int]], target: str, compiler: str,
    pipeline: str = "O2", profile: Any = None, whole: bool = False,
) -> list[Task]:  # fmt: skip
    """The GEMM and convolution tasks of one model for one canonical target (``whole``:
    each step as one kernel, not the thread split's tasks)."""
    table = codegen_target(target).table
    optimised, _ = optimize(import_onnx(model_path, dict(input_shapes)), pipeline, target=table)
    verify(optimised)
    compiled = plan(optimised, profile)
    width = table.vector_width
    _, layout = pack_weights({k: c.data for k, c in compiled.graph.constants.items()})
    offsets = {e.name: e.offset for e in layout.entries}
    constants = {k: c.data for k, c in compiled.graph.constants.items()}
    backends = tuple(p.backend for p in compiled.partitions.partitions)

    def pack(op: str, attrs: Any, index: int, value: np.ndarray, shapes: Any) -> Any:
        return emitter_for(op).pack(op, attrs, index, value, shapes, width)

    kplan, _ = build_kernel_plan(
        compiled.view, compiled.memory, compiled.partitions.group_of, backends, offsets,
        constants, pack, None if whole else (lambda s: split_step(s, width)),
    )  # fmt: skip
    # the kernels emitted, and whether each is a task of a split step
    steps = [(t, bool(s.parts)) for s in kplan.steps() for t in (s.parts or (s,))]
    d = Dispatch(None, target, compiler)
    tasks: dict[str, Task] = {}
    for step, part in steps:
        shapes = [None if o is None else o.shape for o in step.inputs]
        if step.op in GEMM_OPS:
            gs = GemmShape(step.op, step.attrs, shapes)
            key = d.key("gemm", gemm_shape(gs))
            flops = 2 * gs.batch * gs.M * gs.N * gs.K
            default: Any = default_gemm_schedule(gs.M, gs.ldc, gs.K, width, table=table)
            shape: Any = gs
            packed_nr = default.nr if part else None  # split with the default schedules
        elif step.op in CONV_OPS:
            x, w = step.inputs[0], step.inputs[1]
            assert x is not None and w is not None
            geo = Geometry(step.attrs, x.shape, w.shape, width)
            if geo.L <= 1:
                continue
            key = d.key("conv", conv_shape(geo))
            flops = geo.flops
            default, shape, packed_nr = default_conv_schedule(geo, table), geo, None
        else:
            continue
        if key.text in tasks:
            tasks[key.text].count += 1
            if packed_nr is not None:  # one step of this shape is a task: its width holds
                tasks[key.text].packed_nr = packed_nr
        else:
            kern = Kernel(step.op, step.attrs, step.inputs, step.outputs, width)
            tasks[key.text] = Task(key, kern, 1, flops, default, shape, packed_nr)
    return sorted(tasks.values(), key=lambda t: (-t.total_flops, t.key.text))


# -- budget --------------------------------------------------------------------------------


def allocate(tasks: Sequence[Task], budget_s: float) -> dict[str, float]:
    """Seconds per task key, in proportion to its share of the FLOPs (0 below MIN_SHARE)."""
    total = sum(t.total_flops for t in tasks) or 1
    big = [t for t in tasks if t.total_flops / total >= MIN_SHARE]
    big_total = sum(t.total_flops for t in big) or 1
    out = {t.key.text: 0.0 for t in tasks}
    for t in big:
        out[t.key.text] = budget_s * t.total_flops / big_total
    return out


# -- candidates and the cost model ----------------------------------------------------------


def _registers(width: int) -> int:
    return active_table(width).registers


def gemm_cost(M: int, N: int, K: int, s: Any, width: int) -> float:
    """Predicted relative time of a GemmSchedule (lower is better; 1.0 ~ peak FMA rate)."""
    nvec = s.nr // width
    rows = -(-M // s.mr) * s.mr
    cols = -(-N // s.nr) * s.nr
    waste = (rows * cols) / (M * N)  # padded work per useful FMA
    fma_per_load = (s.mr * nvec) / (s.mr + nvec)
    intensity = min(1.0, fma_per_load / 6.0)  # ~2 loads and 2 FMAs a cycle
    chains = min(1.0, s.mr * nvec / 8.0)  # FMA latency 4 x 2 ports
    l1 = 1.0 if s.kc * s.nr * 4 <= 32 * 1024 else 1.25
    chunks = -(-K // s.kc)
    c_traffic = 1.0 + (chunks - 1) * 2.0 / max(s.kc, 1)  # C re-read and re-written per chunk
    return waste / (intensity * chains) * l1 * c_traffic


def gemm_candidates(
    M: int, N: int, K: int, width: int, default: Any, limit: int, nr_only: int | None = None
) -> list[Any]:
    """The default first, then the best ``limit`` schedules by :func:`gemm_cost`
    (``nr_only``: only that panel width)."""
    regs = _registers(width)
    n_vecs = -(-N // width)
    pool = []
    kcs = sorted({k for k in (64, 128, 256, 384, 512, K) if 0 < k <= K} | {min(K, default.kc)})
    for nvec in range(1, min(4, n_vecs) + 1):
        nr = nvec * width
        if nr_only is not None and nr != nr_only:
            continue
        for mr in range(1, min(M, 16) + 1):
            if mr * nvec + nvec + 1 > regs:
                continue  # the tile and its B vectors would spill
            for kc in kcs:
                nc = max(nr, min(-(-N // nr) * nr, ((512 * 1024) // (kc * 4)) // nr * nr))
                mc = max(mr, min(-(-M // mr) * mr, 144 // mr * mr))
                for order in ("nm", "mn"):
                    s = GemmSchedule(mr=mr, nr=nr, kc=kc, mc=mc, nc=nc, unroll=2 if kc >= 2 else 1,
                                     loop_order=order)  # fmt: skip
                    if s != default:
                        pool.append((gemm_cost(M, N, K, s, width), s))
    pool.sort(key=lambda cs: (cs[0], repr(cs[1])))
    return [default] + [s for _, s in pool[:limit]]


def conv_cost(geo: Any, s: Any) -> float:
    """Predicted relative time of a ConvSchedule (lower is better; 1.0 ~ peak FMA rate):
    column padding of the tile against the row, independent FMA chains (latency 4 x 2
    ports, with room: 16), FMAs per load (a weight vector per output-channel vector, a broadcast per
    column, or per column and vector when the vectors read different groups), and
    register pressure near the file's size (a 16-register file: the default heuristic's
    :func:`~guard.compiler.codegen.conv.schedule.row_cost`). The
    unroll and the loop order are left to measurement: a hair's penalty keeps the
    plain variant of each tile first."""
    extra = 1.0 + 0.01 * (s.unroll != 1) + 0.01 * (s.loop_order != "kv_oh")
    regs = _registers(geo.L)
    if regs < 32:  # the default heuristic's model of a 16-register file
        return row_cost(geo, s, regs) * extra
    t, kb = s.ow_block, min(s.oc_block, geo.KV)
    ow = max(geo.OW, 1)
    waste = (-(-ow // t) * t) / ow
    chains = min(1.0, kb * t / 16.0)
    loads = kb + t * (1 if geo.vectors_share_input(kb) else kb)
    intensity = min(1.0, (kb * t / loads) / 2.0)
    # A tile that leaves under 4 vector registers for addresses and temporaries spills in
    # LLVM's hands even though it "fits" (measured here: 2 x 14 columns ran at 0.3x).
    spills = 3.0 if kb * (t + 1) + 1 > _registers(geo.L) - 4 else 1.0
    return waste / (chains * intensity) * extra * spills


def conv_candidates(geo: Any, default: Any, limit: int) -> list[Any]:
    """The default first, then the best ``limit`` points of conv_space by conv_cost."""
    pool = [(conv_cost(geo, s), s) for s in conv_space(geo) if s != default]
    pool.sort(key=lambda cs: (cs[0], repr(cs[1])))
    return [default] + [s for _, s in pool[:limit]]


def candidates(task: Task, limit: int) -> list[Any]:
    width = task.kernel.vector_width
    if task.key.op == "gemm":
        gs = task.shape
        return gemm_candidates(gs.M, gs.N, gs.K, width, task.default, limit, task.packed_nr)
    return conv_candidates(task.shape, task.default, limit)


# -- measurement --------------------------------------------------------------------------


class Compiled:
    """One task's kernel compiled alone with one schedule, with buffers to call it on."""

    def __init__(self, task: Task, schedule: Any, target: Any, rng: np.random.Generator) -> None:
        k = task.kernel
        n_in, n_out = len(k.inputs), len(k.outputs)
        module = ir.Module(name="guard_tune")
        module.triple = target.triple
        fn = ir.Function(module, ir.FunctionType(VOID, [PTR] * (n_in + n_out)), "guard_tune_kernel")
        b = ir.IRBuilder(fn.append_basic_block("entry"))
        ins = [None if o is None else fn.args[j] for j, o in enumerate(k.inputs)]
        d = Dispatch(None, task.key.target, task.key.compiler, forced={task.key.text: schedule})
        with applied(d):
            emitter_for(k.op).emit(b, ins, list(fn.args[n_in:]), k)
        if not b.block.is_terminated:
            b.ret_void()
        t0 = time.perf_counter()
        gen = compile_module(module, target)
        self.compile_s = time.perf_counter() - t0
        self._obj = LoadedObject(gen.object_code, target)
        self._buffers = [
            self._buffer(task, j, o, rng) for j, o in enumerate((*k.inputs, *k.outputs))
        ]
        ptrs = [0 if a is None else a.ctypes.data for a in self._buffers]
        proto = ctypes.CFUNCTYPE(None, *([ctypes.c_void_p] * len(ptrs)))
        self._fn = proto(self._obj.address("guard_tune_kernel"))
        self._args = [ctypes.c_void_p(p or None) for p in ptrs]

    @staticmethod
    def _buffer(task: Task, j: int, o: Any, rng: np.random.Generator) -> np.ndarray | None:
        if o is None:
            return None
        n = o.nbytes // 4 + 64
        if j == 1 and o.space == "packed":  # padded panels: bounded by the widest tile
            if task.key.op == "gemm":
                gs = task.shape
                n = max(n, gs.batch * gs.K * (gs.N + 64) + 64)
            else:
                geo = task.shape
                n = max(n, (geo.K + geo.g * geo.L) * geo.Cg * geo.R * geo.S + 64)
        return rng.standard_normal(n).astype(np.float32)

    def call(self, times: int) -> None:
        fn, args = self._fn, self._args
        for _ in range(times):
            fn(*args)


def measure(
    task: Task, schedules: Sequence[Any], target: Any, *, reps: int = 7,
    clock: Callable[[], float] = time.perf_counter, deadline: float | None = None,
    compile_one: Callable[..., Any] = Compiled, timer: Callable[[], float] | None = None,
) -> list[Measured]:  # fmt: skip
    """Compile each schedule, then time them interleaved; per-call seconds per round.

    ``deadline`` (a ``clock()`` value) is kept, measuring included: a candidate is added
    only while compiling it (the mean compile so far) and timing every candidate built
    (``WARMUP_ROUNDS + reps`` rounds of about ``MIN_ROUND_S`` each) still end before it.
    The default, first in ``schedules``, is always compiled and measured. ``timer`` times
    the calls (default: ``clock``)."""
    timer = timer or clock
    rng = np.random.default_rng(0)
    built: list[tuple[Measured, Any]] = []
    began = clock()
    round_s = 2 * MIN_ROUND_S  # a round of one candidate, with room for the slowest's
    for i, s in enumerate(schedules):
        if i > 0 and deadline is not None:
            compile_s = (clock() - began) / len(built)
            timing_s = (len(built) + 1) * (WARMUP_ROUNDS + reps) * round_s
            if clock() + compile_s + timing_s > deadline:
                break
        c = compile_one(task, s, target, rng)
        built.append((Measured(s, compile_s=c.compile_s), c))
    # Calls per round: enough that one round of the slowest candidate is >= MIN_ROUND_S.
    per_call = []
    for _, c in built:
        t0 = timer()
        c.call(1)
        per_call.append(max(timer() - t0, 1e-9))
    calls = max(1, min(10_000, int(MIN_ROUND_S / max(per_call)) + 1))
    for r in range(WARMUP_ROUNDS + reps):
        order = built if r % 2 == 0 else built[::-1]  # alternate who goes first
        for m, c in order:
            t0 = timer()
            c.call(calls)
            dt = (timer() - t0) / calls
            if r >= WARMUP_ROUNDS:
                m.samples.append(dt)
    return [m for m, _ in built]


def _wins(m: Measured, default: Measured) -> bool:
    """``m`` beats the default: its median by more than MARGIN, and in at least
    ``PAIRED_WINS`` of the rounds (samples of one round were taken side by side, so a
    neighbour's burst slows both; a single lucky round does not make a winner)."""
    if not m.samples or m.median >= default.median * (1 - MARGIN):
        return False
    pairs = list(zip(m.samples, default.samples, strict=False))
    return sum(a < b for a, b in pairs) >= PAIRED_WINS * len(pairs)


def choose(results: Sequence[Measured]) -> tuple[Measured, Measured]:
    """(winner, default): the fastest candidate that beats the default (:func:`_wins`),
    else the default itself."""
    default = results[0]
    for m in sorted(results[1:], key=lambda m: m.median):
        if _wins(m, default):
            return m, default
    return default, default


def tune_tasks(
    tasks: Sequence[Task], target: Any, budget_s: float, *, reps: int = 7,
    floor_candidates: int = 1, clock: Callable[[], float] = time.perf_counter,
    timer: Callable[[], float] = time.thread_time, log: Callable[[str], None] = lambda s: None,
    propose: Callable[[Task, int], list[Any]] = candidates, compile_one: Callable[..., Any] = Compiled,
) -> list[Entry]:  # fmt: skip
    """An entry for every task the budget reaches: the budget spent by share, candidates
    ranked, measured. ``budget_s`` is wall clock for the whole call, measuring included:
    no task starts after it is spent (the ones left keep the default schedule, and the
    log says how many, nor one whose default would not fit by the cheapest so far), and none
    runs past it but to measure its default."""
    share = allocate(tasks, budget_s)
    entries: list[Entry] = []
    total_flops = sum(t.total_flops for t in tasks) or 1
    end = clock() + budget_s
    least = 0.0  # the cheapest default so far: what one more task costs at the least
    for n, t in enumerate(tasks):
        start = clock()
        if start + least > end:
            log(f"  budget of {budget_s:g} s spent: {len(tasks) - n} task(s) keep the default")
            break
        secs = min(share[t.key.text], end - start)
        limit = floor_candidates if secs <= 0 else 64
        cands = propose(t, limit)
        res = measure(t, cands, target, reps=reps, clock=clock, timer=timer,
                      deadline=min(start + secs, end) if secs > 0 else end,
                      compile_one=compile_one)  # fmt: skip
        # compiling and timing the default alone: the least a further task costs
        alone = res[0].compile_s + (WARMUP_ROUNDS + reps) * 2 * MIN_ROUND_S
        least = alone if not entries else min(least, alone)
        win, default = choose(res)
        entries.append(
            Entry(
                t.key,
                win.schedule,
                win.median,
                default.schedule,
                default.median,
                {
                    "measured": {
                        "warmup_rounds": WARMUP_ROUNDS,
                        "reps": reps,
                        "threads": 1,
                        "clock": getattr(timer, "__name__", "timer"),
                        "candidates": len(res),
                        "budget_s": round(secs, 3),
                        "flops_share": round(t.total_flops / total_flops, 4),
                        "count": t.count,
                    },
                    "tuned_at": datetime.now(UTC).isoformat(timespec="seconds"),
                },
            )  # fmt: skip
        )
        log(
            f"  {t.key.short()} x{t.count}: {len(res)} candidate(s) in {clock() - start:.1f} s, "
            f"default {default.median * 1e6:.1f} us -> {win.median * 1e6:.1f} us "
            f"({default.median / win.median:.2f}x) {sch.to_dict(win.schedule)}"
        )
    return entries
