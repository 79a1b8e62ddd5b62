"""The tvm backend: relax ONNX import, TVM's default CPU pipeline, a relax VM to run it.

build: ``tvm.relax.frontend.onnx.from_onnx`` with every input shape and dtype bound; the
target is ``guard.manifest.target_string.to_tvm_dict(canonical)`` (TVM 0.27 refuses CLI strings);
the pipeline is TVM's default CPU one (library dispatch, legalize, fold, fuse, dataflow
lowering, finalize) split in three so that (a) MetaSchedule tuning tasks are extracted from
the same fused module the build compiles, (b) a tuning cache's matching schedules are
applied to it (``MetaScheduleApplyDatabase``, see :mod:`guard.backends.tvm_tuning`) and
(c) the static memory plan is read right after ``StaticPlanBlockMemory``. Unscheduled TIR
functions compile as plain loops: untuned TVM on CPU is far slower than onnxruntime.
The payload is ``model.so`` (``export_library``); ``tvm.json`` holds what load needs.

load: ``tvm.runtime.load_module`` + ``relax.VirtualMachine`` on ``tvm.cpu()``. Threads: the
runtime pool starts with ``TVM_NUM_THREADS`` = every core and ``TVM_BIND_THREADS=0``, then
``runtime.config_threadpool`` sizes it to the session's threads (see ``_set_threads``); what
was done is recorded in ``session_options``.

tvm is imported inside functions only: importing guard never imports tvm.
"""

from __future__ import annotations

import functools
import json
import os
import sys
import time
import warnings
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypedDict

import numpy as np

from guard.backends import tvm_memory, tvm_tuning
from guard.backends.base import (
    BuildInfo,
    BuildRequest,
    MemoryInfo,
    MemoryJson,
    PartitionInfo,
    PartitionsJson,
)
from guard.backends.tvm_import import graph_io, host_cores, import_onnx, tvm_target
from guard.core.errors import ModelError
from guard.core.json_types import JsonObject
from guard.core.schema import Schema
from guard.manifest.written import ComponentPins, TuningObservations

PAYLOAD = "model.so"
META = "tvm.json"
SCHEMA_VERSION = 1
_META = Schema("tvm artefact metadata", SCHEMA_VERSION, "Rebuild the artefact.")
PIPELINE = "tvm-relax-default-cpu"


# -- small helpers ---------------------------------------------------------------------------


class _Threading(TypedDict):
    """How _set_threads sized TVM's pool (recorded in the session options)."""

    threads: int
    runtime_num_threads: int
    TVM_NUM_THREADS: str
    TVM_BIND_THREADS: str
    config_threadpool: list[int]
    env_set_before_tvm_import: bool


class _Captured(TypedDict, total=False):
    """What the build's pipeline saw: the schedules applied, the planned storage."""

    applied: int
    plan: dict[str, int]  # guard.backends.tvm_memory.planned_storage


def _set_threads(threads: int) -> _Threading:
    """Size TVM's runtime thread pool for this session; say how it was done.

    TVM's pool starts lazily, on first use, with ``TVM_NUM_THREADS`` workers, and
    ``runtime.config_threadpool`` can later shrink it but never grow it past that. So the
    pool is started with every core this process may use (or ``threads`` if more) and then
    sized to ``threads``. TVM pins the calling thread to one core when it (re)configures
    the pool, and that pin would leak into everything else this process measures:
    ``TVM_BIND_THREADS=0`` turns binding off, and the caller's affinity is put back anyway.
    """
    already = "tvm" in sys.modules
    os.environ["TVM_BIND_THREADS"] = "0"
    os.environ["TVM_NUM_THREADS"] = str(max(threads, host_cores()))
    saved = os.sched_getaffinity(0) if hasattr(os, "sched_getaffinity") else None
    import tvm  # noqa: F401 - registers the runtime functions
    import tvm_ffi

    tvm_ffi.get_global_func("runtime.config_threadpool")(1, threads)
    if saved is not None and os.sched_getaffinity(0) != saved:
        os.sched_setaffinity(0, saved)
    got = int(tvm_ffi.get_global_func("runtime.NumThreads")())
    if got != threads:
        warnings.warn(
            f"tvm: asked for {threads} runtime threads, TVM's pool runs {got} (it was "
            "started smaller earlier in this process and cannot grow)",
            stacklevel=3,
        )
    return {
        "threads": threads,
        "runtime_num_threads": got,
        "TVM_NUM_THREADS": os.environ["TVM_NUM_THREADS"],
        "TVM_BIND_THREADS": "0",
        "config_threadpool": [1, threads],
        "env_set_before_tvm_import": not already,
    }


# -- build -----------------------------------------------------------------------------------


def _compile(mod: Any, target: Any, database: Any, captured: _Captured) -> Any:
    """TVM's default CPU pipeline with the cache's schedules applied; captures the plan."""
    import tvm
    from tvm import relax
    from tvm.relax.backend.cpu_generic import pipeline as cpu

    lower = cpu.dataflow_lower_passes(target)
    finalize = cpu.finalize_passes(target)
    if not finalize or finalize[0].info.name != "StaticPlanBlockMemory":
        raise ModelError(
            "TVM's CPU finalize passes no longer start with StaticPlanBlockMemory",
            hint="guard's tvm backend needs updating for this TVM version.",
        )

    @tvm.transform.module_pass(opt_level=0, name="guard_tvm_pipeline")
    def _pipeline(m: Any, _ctx: Any) -> Any:
        with target:
            m = tvm.transform.Sequential(tvm_tuning.prepare_passes(target))(m)
            if database is not None:
                m = relax.transform.MetaScheduleApplyDatabase()(m)
                captured["applied"] = sum(
                    1
                    for _, f in m.functions.items()
                    if isinstance(f, tvm.tirx.PrimFunc)
                    and f.attrs is not None
                    and bool(f.attrs.get("tirx.is_scheduled", False))
                )
            m = tvm.transform.Sequential([*lower, finalize[0]])(m)
            captured["plan"] = tvm_memory.planned_storage(m)
            return tvm.transform.Sequential(finalize[1:])(m)

    with tvm.transform.PassContext(opt_level=3):
        if database is not None:
            with database:
                return tvm.compile(mod, target=target, relax_pipeline=_pipeline)
        return tvm.compile(mod, target=target, relax_pipeline=_pipeline)


def _versions() -> tuple[ComponentPins, ComponentPins]:
    import tvm

    compiler: ComponentPins = {"name": "apache-tvm", "version": tvm.__version__}
    try:
        major = tvm.target.codegen.llvm_version_major(allow_none=True)
    except Exception:  # noqa: BLE001
        major = None
    if major is not None:
        compiler["llvm_version_major"] = int(major)
    try:
        from importlib.metadata import version

        compiler["tvm_ffi_version"] = version("apache-tvm-ffi")
    except Exception:  # noqa: BLE001
        pass
    return compiler, {"name": "apache-tvm", "version": tvm.__version__}


class TvmSession:
    """A loaded tvm artefact: a relax VM over ``model.so``."""

    def __init__(self, artefact_dir: Path, threads: int):
        self._threading = _set_threads(threads)
        import tvm
        from tvm import relax

        meta = self._meta = _META.load(artefact_dir / META)
        try:
            lib = tvm.runtime.load_module(str(artefact_dir / PAYLOAD))
        except Exception as exc:  # noqa: BLE001
            first = (str(exc).strip().splitlines() or [repr(exc)])[-1]
            raise ModelError(
                f"cannot load the compiled library: {first}",
                where=str(artefact_dir / PAYLOAD),
                hint="Rebuild it.",
            ) from None
        self._dev = tvm.cpu(0)
        self._vm = relax.VirtualMachine(lib, self._dev)
        self._main = self._vm["main"]
        self.input_names = [n for n, _ in meta["inputs"]]
        self._dtypes = {n: d for n, d in meta["inputs"]}
        self.output_names = list(meta["outputs"])

    def run(self, feeds: dict[str, np.ndarray]) -> list[np.ndarray]:
        import tvm

        args = [
            tvm.runtime.tensor(np.ascontiguousarray(feeds[n], dtype=self._dtypes[n]), self._dev)
            for n in self.input_names
        ]
        out = self._main(*args)
        if isinstance(out, tvm.runtime.Tensor):
            return [out.numpy()]
        return [o.numpy() for o in out]

    def bound_run(self, feeds: dict[str, np.ndarray]) -> Callable[[], None]:
        """A call that runs one inference on ``feeds`` with the inputs set once, as
        onnxruntime's ``bound_run``: the VM's stateful entry keeps its outputs, so no numpy
        array is converted in or out per call and a counted run (guard.counting.child)
        counts the inference, not Python's allocation history."""
        import tvm

        self.run(feeds)  # a warm-up that also checks the feeds
        args = [
            tvm.runtime.tensor(np.ascontiguousarray(feeds[n], dtype=self._dtypes[n]), self._dev)
            for n in self.input_names
        ]
        self._vm.set_input("main", *args)
        invoke = functools.partial(self._vm.invoke_stateful, "main")

        def call() -> None:
            invoke()

        call.keep = args  # type: ignore[attr-defined]
        return call

    def partitions(self) -> PartitionInfo:
        return PartitionInfo.from_dict(self._meta["partitions"])

    def memory(self) -> MemoryInfo:
        return MemoryInfo.from_dict(self._meta["memory"])


class TvmBackend:
    name = "tvm"

    def versions(self) -> tuple[ComponentPins, ComponentPins]:
        return _versions()

    def build(self, req: BuildRequest) -> BuildInfo:
        if req.options:
            raise ModelError(
                f"options.tvm: unknown option(s) {sorted(req.options)}",
                hint="The tvm backend takes no options; pass the tuning cache "
                "as the build's tuning_cache.",
            )
        threading = _set_threads(req.threads)
        import onnx

        t0 = time.perf_counter()
        model = onnx.load(str(req.model_path), load_external_data=False)
        ins, outs = graph_io(model)
        target = tvm_target(req.target_canonical)
        mod = import_onnx(req.model_path, req.input_shapes)
        t_import = time.perf_counter() - t0
        tuning: TuningObservations = {}
        database = None
        if req.tuning_cache is not None:
            tasks = tvm_tuning.extract_tasks(tvm_tuning.prepare(mod, target), target)
            found = tvm_tuning.lookup(
                Path(req.tuning_cache),
                tasks,
                target,
                target_has_num_cores="num-cores" in target.export(),
            )
            database = found.database
            tuning = found.to_dict()
            tuning["tasks"] = len(tasks)
            tuning["target"] = req.target_canonical
            if found.misses:
                other = (
                    f"; {found.other_target} of them are in the cache for another target"
                    if found.other_target
                    else ""
                )
                warnings.warn(
                    f"tvm tuning cache {req.tuning_cache}: {found.misses} of {len(tasks)} "
                    f"tasks missed for target {req.target_canonical!r}{other}; they compile "
                    f"untuned: {', '.join(found.missed[:5])}",
                    stacklevel=2,
                )
        captured: _Captured = {}
        t1 = time.perf_counter()
        try:
            ex = _compile(mod, target, database, captured)
        except ModelError:
            raise
        except (RuntimeError, ValueError) as exc:  # TVM's errors; a guard bug propagates
            first = (str(exc).strip().splitlines() or [repr(exc)])[-1]
            raise ModelError(
                f"TVM failed to compile the model: {first}", where=str(req.model_path)
            ) from None
        t_compile = time.perf_counter() - t1
        if database is not None:
            tuning["applied"] = captured.get("applied", 0)
            if tuning["applied"] != tuning["hits"]:
                raise ModelError(
                    f"tuning cache: {tuning['hits']} task(s) matched but "
                    f"{tuning['applied']} schedule(s) were applied",
                    where=str(req.tuning_cache),
                    hint="guard's look-up and TVM's disagree; report this with the cache.",
                )
        ex.export_library(str(req.out_dir / PAYLOAD))
        n_nodes = len(model.graph.node)
        plan = captured.get("plan", {})
        live = tvm_memory.onnx_liveness(req.model_path, req.input_shapes)
        arena = plan.get("storage_bytes") if not plan.get("dynamic_storages") else None
        memory: MemoryJson = {
            "arena_bytes": arena,
            "lower_bound_bytes": live["lower_bound_bytes"]
            if live["lower_bound_bytes"] >= 0
            else None,
            "how": "arena: sum of the static relax.memory.alloc_storage sizes TVM's "
            "StaticPlanBlockMemory planned for the relax VM (intermediates only; graph "
            "outputs are allocated apart, see extra.output_bytes; weights and the VM's "
            "own overhead are not counted); lower bound: peak, over the ONNX graph's "
            "node order, of live intermediate and output tensor bytes from ONNX shape "
            "inference with the bound input shapes (each freed after its last "
            "consumer). TVM fuses nodes, so its plan may go below the ONNX bound.",
            "extra": {
                "output_bytes": plan.get("unplanned_tensor_bytes"),
                "storages": plan.get("storages"),
                "dynamic_storages": plan.get("dynamic_storages"),
                "liveness_unknown_tensors": live["unknown_tensors"],
            },
        }
        partitions: PartitionsJson = {
            "count": 1,
            "delegated_nodes": n_nodes,
            "fallback_nodes": 0,
            "by_provider": {"tvm:llvm": n_nodes},
            "details": [{"provider": "tvm:llvm", "nodes": n_nodes}],
            "how": "TVM compiles the whole relax module for one llvm target: one partition "
            "holding every ONNX node (count of the ONNX graph's nodes); there is no "
            "fallback provider.",
        }
        session_opts: JsonObject = {
            **threading,
            "device": "cpu(0)",
            "executor": "relax.VirtualMachine",
            "pipeline": PIPELINE,
            "opt_level": 3,
            "tuning_applied": database is not None,
        }
        meta = {
            "schema_version": SCHEMA_VERSION,
            "inputs": ins,
            "outputs": outs,
            "input_shapes": {k: list(v) for k, v in req.input_shapes.items()},
            "target_canonical": req.target_canonical,
            "target": str(target),
            "session_options": session_opts,
            "partitions": partitions,
            "memory": memory,
            "tuning": tuning,
            "timings_s": {"import": round(t_import, 4), "compile": round(t_compile, 4)},
        }
        (req.out_dir / META).write_text(json.dumps(meta, indent=2, sort_keys=True))
        compiler, runtime = _versions()
        compiler["pipeline"] = PIPELINE
        return BuildInfo(
            payload=PAYLOAD,
            compiler=compiler,
            runtime=runtime,
            session_options=session_opts,
            tuning=tuning,
        )

    def load(self, artefact_dir: Path, threads: int) -> TvmSession:
        return TvmSession(Path(artefact_dir), threads)


def tune(
    model_path: Path | str,
    input_shapes: dict[str, tuple[int, ...]] | dict[str, list[int]],
    target_canonical: str,
    db_dir: Path | str,
    max_trials_global: int,
    num_trials_per_iter: int = 2,
    **kw: Any,
) -> tvm_tuning.TuneSummary:
    """Small MetaSchedule tuning into a JSON database: see guard.backends.tvm_tuning.tune."""
    return tvm_tuning.tune(
        model_path,
        input_shapes,
        target_canonical,
        db_dir,
        max_trials_global,
        num_trials_per_iter,
        **kw,
    )
