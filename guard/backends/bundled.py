"""The ``bundled`` backend: guard's own compiler (guard/compiler) behind the Backend protocol.

Build = import → optimise (pipeline O0/O1/O2) → partition (native backend or a delegate
profile, with the reference interpreter as fallback) → schedule → plan one arena → write a
self-contained artefact (guard.compiler.runtime.artefact: IR text, flat weights + index, partition
report, frozen memory plan, hashes; no pickle). Load = verify every hash, then run the
partitions in schedule order over one preallocated arena (guard.compiler.runtime.engine).

This file is the adapter (BuildRequest in, BuildInfo out; a Session over a loaded
artefact); the artefact layout lives in guard/compiler/runtime/artefact.py, and guard/compiler
never imports guard/backends.
"""

from __future__ import annotations

import contextlib
import os
import warnings
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any, cast

import numpy as np

from guard.backends.base import (
    BuildInfo,
    BuildRequest,
    KernelRow,
    MemoryInfo,
    PartitionDetail,
    PartitionInfo,
)
from guard.compiler import graph_diff, import_onnx, optimize, verify
from guard.compiler.codegen.llvm_target import codegen_target
from guard.compiler.partition.plan import COMPILER_NAME, plan
from guard.compiler.passes.pipeline import pipeline_names
from guard.compiler.runtime.artefact import (
    MANIFEST,
    LoadedArtefact,
    compiler_version,
    load_artefact,
    save_artefact,
    verify_artefact,
)
from guard.compiler.runtime.engine import RUNTIME_NAME, Executor
from guard.compiler.tuning.cache import load
from guard.compiler.tuning.dispatch import Dispatch, applied
from guard.core.budget_bytes import parse_budget
from guard.core.errors import ModelError, UsageError
from guard.core.json_types import Json
from guard.manifest.written import ComponentPins, TuningObservations


def build_bundled(req: BuildRequest) -> BuildInfo:
    """Build one artefact for a guard.backends.base.BuildRequest; returns its BuildInfo.

    Options (``req.options``, from the suite's ``options.bundled`` and ``profile``):
    ``pipeline`` (default O2) and ``profile`` (a shipped profile name or a YAML path;
    default: the native backend). ``options.bundled.tuning_cache`` arrives as
    ``req.tuning_cache``: GEMM and convolution schedules come from it on exact key
    matches, the default heuristic otherwise (each miss warned, counted in ``tuning``).
    Pins: compiler = guard's compiler version, the pipeline name, the canonical target and
    the profile.
    """

    opts = dict(req.options)
    pipeline = str(opts.pop("pipeline", "O2"))
    profile = opts.pop("profile", None)
    raw_budget = opts.pop("memory_budget", None)
    calibration = opts.pop("calibration", None)
    if opts:
        raise ModelError(
            f"options.bundled: unknown option(s) {sorted(opts)}",
            where=str(req.model_path),
            hint="Known: pipeline, profile, memory_budget, calibration.",
        )
    budget = (
        None if raw_budget is None else parse_budget(raw_budget, "options.bundled.memory_budget")
    )
    cal_path = None if calibration is None else Path(str(calibration))
    if cal_path is not None and not cal_path.exists():
        raise UsageError(
            f"options.bundled.calibration: {cal_path} does not exist",
            where=str(req.model_path),
            hint="The int8 rung's calibration data: an .npz, a directory of .npy/.npz or "
            "an ONNX test_data_set_N (relative to the suite file).",
        )
    if pipeline not in pipeline_names():
        raise ModelError(
            f"options.bundled.pipeline: unknown pipeline {pipeline!r}",
            where=str(req.model_path),
            hint=f"Use one of: {', '.join(pipeline_names())}.",
        )
    cpus = os.cpu_count() or 1
    if req.threads > cpus:
        # Runs anyway (one line, in the build's warnings): the threads share the CPUs.
        warnings.warn(
            f"threads: {req.threads} is more than this host's {cpus} CPUs; running anyway, "
            "the threads share the CPUs (measure with threads <= CPUs)",
            RuntimeWarning,
            stacklevel=2,
        )
    imported = import_onnx(req.model_path, dict(req.input_shapes))
    # Layouts (the channel block) follow the target's table, like every kernel's schedule;
    # a delegate profile generates no code here and keeps the default table.
    native = profile in (None, "native")
    table = codegen_target(req.target_canonical).table if native else None
    optimised, report = optimize(imported, pipeline, target=table)
    verify(optimised)
    compiled = plan(optimised, profile)
    fitted = None
    if budget is not None:
        # The escape ladder (guard.compiler.fit): the first rung whose arena fits, else the
        # smallest reachable plan, with the search bounded (fit.ladder.SEARCH_S).
        from guard.quantize.fit_hook import quantise_hook

        hook = quantise_hook(req.model_path, req.input_shapes, pipeline=pipeline, table=table,
                             calibration=cal_path)  # fmt: skip
        fitted = fit_budget(optimised, budget, profile, req.target_canonical, hook)
        compiled = fitted.chosen
    with _tuning(req) as dispatch:
        manifest = save_artefact(
            compiled,
            req.out_dir,
            pipeline=pipeline,
            target=req.target_canonical,
            budget=None if fitted is None else fitted.to_dict(),
        )
    tuning: TuningObservations = {}
    if dispatch is not None:
        # Real look-ups of the emitted kernels: entries, hits, misses and, per missed
        # task, the nearest key with how it differs (what the tuning check and doctor show).
        dispatch.warn_misses(str(req.tuning_cache))
        # (the dispatch's summary: entries, hits, misses, tasks, missed, kernel_speedup)
        tuning = cast(TuningObservations, {**dispatch.summary(), "target": req.target_canonical})
    # the artefact's own compiler pins (guard.compiler.runtime.artefact: name, version,
    # pipeline, target, profile)
    compiler = cast(ComponentPins, dict(manifest["compiler"]))
    if manifest.get("codegen"):
        # Pins that change the generated code: llvmlite/LLVM versions, triple, cpu,
        # features, opt level and the target table (its cache sizes are the host's when
        # the target is the host), not the compile time, which varies run to run.
        keys = (
            "llvmlite",
            "llvm",
            "triple",
            "cpu",
            "features",
            "vector_width",
            "int_dot",
            "opt_level",
        )
        compiler["codegen"] = {k: manifest["codegen"][k] for k in (*keys, "table")}
    return BuildInfo(
        payload=MANIFEST,
        compiler=compiler,
        runtime=runtime_pins(),
        session_options={"threads": req.threads, "pipeline": pipeline, "profile": compiled.profile},
        graph=graph_diff(imported, optimised, report),
        tuning=tuning,
    )


@contextlib.contextmanager
def _tuning(req: BuildRequest) -> Iterator[Dispatch | None]:
    """The tuning cache's dispatch context around code generation (None without a cache).

    The cache is validated whole before the build uses any of it (guard.compiler.tuning.cache)."""
    if req.tuning_cache is None:
        yield None
        return

    cache = load(req.tuning_cache)
    with applied(Dispatch(cache, req.target_canonical, compiler_version())) as d:
        yield d


def fit_budget(graph: Any, budget: int, profile: Any, target: str, quantise: Any = None) -> Any:
    """The ladder for ``budget`` (guard.compiler.fit.ladder.Ladder); when a rung above the
    first was needed, its latency against the unconstrained build is measured (both built,
    timed interleaved for 2 s: guard.compiler.fit.measure), and an int8 rung's error
    against the fp32 build. ``quantise``: the int8 rung's hook (guard.quantize.fit_hook:
    options.bundled.calibration, else seeded inputs)."""
    from guard.compiler.fit.ladder import climb
    from guard.compiler.fit.measure import measure

    ladder = climb(graph, budget, profile, quantise=quantise)
    chosen = next((s for s in ladder.steps if s.plan is ladder.chosen), None)
    if chosen is not None and chosen.rung > 1 and ladder.chosen is not ladder.steps[0].plan:
        ladder = measure(ladder, seconds=2.0, target=target, only_chosen=True)
    return ladder


def runtime_pins() -> ComponentPins:
    return {"name": RUNTIME_NAME, "version": compiler_version(), "numpy": np.__version__}


class ArtefactSession:
    """A loaded bundled artefact behind the Session protocol (guard.backends.base)."""

    def __init__(self, art_dir: str | Path, executors: dict[str, Executor] | None = None) -> None:
        self.loaded = load_artefact(art_dir)
        self._runtime = self.loaded.runtime(executors)
        self.input_names = list(self._runtime.input_names)
        self.output_names = list(self._runtime.output_names)

    def run(self, feeds: dict[str, np.ndarray]) -> list[np.ndarray]:
        out = self._runtime.run(feeds)
        return [out[o] for o in self.output_names]

    def kernels(
        self, feeds: dict[str, np.ndarray], top: int = 10, runs: int = 5
    ) -> list[KernelRow]:
        """The generated kernels by share of time (the profiling entry, ``runs`` inferences):
        where to look first when the compiled model is slow. Empty without generated code."""
        rows = self._runtime.profile(feeds, runs)
        return [
            {
                "kernel": r["kernel"],
                "op": r["op"],
                "share": r["share"],
                "ms": r["ms"],
                "nodes": r["nodes"],
            }
            for r in rows[:top]
        ]

    def partitions(self) -> PartitionInfo:
        p = self.loaded.partitions
        # the partition report's partitions (guard.compiler.partition.assign)
        details = [cast(PartitionDetail, dict(d)) for d in p["partitions"]]
        native = self.loaded.native
        if native is not None:
            # Which kernel each node became (kernels.json), per native partition.
            by_part = {k.partition: k for k in native.plan.partitions}
            for d in details:
                part = by_part.get(d.get("id"))
                if part is not None:
                    d["kernels"] = [[s.node, s.kernel] for s in part.steps]
        # An If/Loop on the host: the partitions of the graphs it calls, per branch or body
        # (whether the model runs native but for the host's dispatch)
        calls = {cf["partition"]: cf["subgraphs"] for cf in p.get("control_flow", [])}
        for d in details:
            if d.get("id") in calls:
                d["subgraphs"] = {
                    a: {"count": r["count"], "fallback_nodes": r["fallback_nodes"]}
                    for a, r in calls[d["id"]].items()
                }
        return PartitionInfo(
            count=p["count"],
            delegated_nodes=p["delegated_nodes"],
            fallback_nodes=p["fallback_nodes"],
            by_provider=dict(p["by_backend"]),
            details=details,
            how=(
                "guard partitioner: backends "
                + " > ".join(p["backends"])
                + f"; {len(p['splits'])} split node(s), {p['boundary_bytes']} B crossing "
                f"{len(p['boundaries'])} boundary tensor(s), fallback tax {p['fallback_tax_ms']} ms"
                + _control_flow_how(p)
            ),
            layout_conversions=p.get("layout_conversions"),
            quant_conversions=p.get("quant_conversions"),
        )

    def memory(self) -> MemoryInfo:
        m = self.loaded.memory
        return MemoryInfo(
            arena_bytes=m.arena_bytes,
            lower_bound_bytes=m.lower_bound_bytes,
            how=(
                "guard memory planner: one arena, greedy offsets "
                f"({m.strategy}, 64-byte aligned) over liveness of the schedule; lower bound = "
                "max over steps of live bytes"
            ),
            extra={
                **m.summary(),
                **(
                    {"budget": self.loaded.manifest["memory_budget"]}
                    if "memory_budget" in self.loaded.manifest
                    else {}
                ),
            },
        )


def _control_flow_how(p: Mapping[str, Json]) -> str:
    """Where control flow cut the model: each If/Loop on the host and its bodies' partitions."""
    cuts = [
        f"{cf['node']} ({cf['op']}) on the host calls "
        + ", ".join(f"{a}: {r['count']} partition(s)" for a, r in cf["subgraphs"].items())
        + (
            f" (specialised: the model once per branch, guard {cf['specialised']['guard']}"
            + "".join(f"; {a} refused" for a in cf["specialised"]["refused"])
            + ")"
            if cf.get("specialised")
            else ""
        )
        for cf in p.get("control_flow", [])
    ]
    return "; control flow: " + "; ".join(cuts) if cuts else ""


class _NoLimit:
    def limit(self, **_: Any) -> contextlib.nullcontext[None]:
        return contextlib.nullcontext()


def _blas_controller() -> Any:
    # threadpoolctl arrives with scikit-learn (pinned); without it BLAS runs unlimited.
    try:
        from threadpoolctl import ThreadpoolController
    except ImportError:  # pragma: no cover - depends on the install
        return _NoLimit()
    return ThreadpoolController()


def generated_only(art: LoadedArtefact) -> bool:
    """Whether no numpy kernel runs: the model is one generated program, or its only
    non-native partitions are If/Loop nodes the host dispatches (silero's sample-rate If)
    and every branch or body is generated only in turn."""
    if art.native is None:
        return False
    if art.native.plan.main is not None:
        return True
    host = [d for d in art.partitions["partitions"] if d["backend"] != "native"]
    return (
        bool(art.subs)
        and all(set(d["ops"]) <= {"If", "Loop"} for d in host)
        and all(generated_only(sub) for sub in art.subs.values())
    )


class BundledSession:
    """A loaded bundled artefact; numpy's BLAS pool limited to the suite's threads."""

    def __init__(self, artefact_dir: Path, threads: int) -> None:
        self._session = ArtefactSession(artefact_dir)
        self.threads = threads
        self._blas = _blas_controller()
        self.input_names = list(self._session.input_names)
        self.output_names = list(self._session.output_names)
        loaded = self._session.loaded
        self.generated_only = generated_only(loaded)
        for program in loaded.programs():  # the generated code's pools: started once per load
            program.start_threads(threads)

    def run(self, feeds: dict[str, np.ndarray]) -> list[np.ndarray]:
        if self.generated_only:  # no numpy kernels run: skip the BLAS limit (~10 us a call)
            return self._session.run(feeds)
        # An oversubscribed OpenBLAS on a busy machine is 10-70x slower, which would
        # measure the OS scheduler, not the model.
        with self._blas.limit(limits=self.threads, user_api="blas"):
            return self._session.run(feeds)

    def partitions(self) -> PartitionInfo:
        return self._session.partitions()

    def kernels(self, feeds: dict[str, np.ndarray]) -> list[KernelRow]:
        with self._blas.limit(limits=self.threads, user_api="blas"):
            return self._session.kernels(feeds)

    def memory(self) -> MemoryInfo:
        return self._session.memory()


class BundledBackend:
    name = "bundled"

    def versions(self) -> tuple[ComponentPins, ComponentPins]:
        return {"name": COMPILER_NAME, "version": compiler_version()}, runtime_pins()

    def build(self, req: BuildRequest) -> BuildInfo:
        return build_bundled(req)

    def load(self, artefact_dir: Path, threads: int) -> BundledSession:
        return BundledSession(Path(artefact_dir), threads)

    def verify(self, artefact_dir: Path) -> str | None:
        """What differs from the hashes the build recorded in artefact.json, or None (the
        cache asks before it reuses an artefact: guard.run.cache_check)."""
        return verify_artefact(artefact_dir)
