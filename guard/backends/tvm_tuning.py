"""MetaSchedule tuning caches for the tvm backend: look-up with hit/miss counts, and tuning.

A tuning cache is a MetaSchedule JSON database directory (``database_workload.json`` +
``database_tuning_record.json``). A record applies to a task when its workload is
structurally equal to the task's fused TIR function *and* its target is the build's
target. TVM's own look-up (``Database.query_tuning_record``) ignores the target: a cache
tuned for another ``-mcpu`` would be applied silently. So guard matches records itself,
copies the matching ones into an in-memory database, and only that database is visible to
``MetaScheduleApplyDatabase``: what is counted as a hit is exactly what is applied.

Target equality: the two targets' ``Target.export()`` dicts, equal after dropping
``num-cores`` when the build's canonical target does not name it. MetaSchedule refuses to
tune without ``num-cores`` (it sizes parallel loops with it), so :func:`tune` adds the
core count it tuned for; the cache key stays the canonical target string the suite
spelled, and the tuned core counts are reported.

Hazard: apache-tvm-ffi 0.1.15.x with apache-tvm 0.27.0.post1 segfaults in ``ToJSONGraph``
on any TIR node (``tvm.ir.save_json(IntImm)``), which MetaSchedule needs to write a
database (reading works). :func:`tune` probes that in a child process first and raises a
one-line error naming the pin instead of killing the process.
"""

from __future__ import annotations

import functools
import hashlib
import json
import subprocess
import sys
import tempfile
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypedDict

from guard.backends.tvm_import import host_cores, import_onnx, tvm_target
from guard.core.errors import ModelError, UsageError
from guard.manifest.written import TuningObservations

DB_FILES = ("database_tuning_record.json", "database_workload.json")
MAX_MISSED_LISTED = 20
# MetaSchedule records a trial that failed to build or run with this cost (MAX_FAIL_COST):
# such a record is no schedule, and never a hit.
FAILED_RUN_SECS = 1e9


# -- the pipeline both tuning and building use, so that task keys match by construction ----


def prepare_passes(target: Any) -> list[Any]:
    """Relax CPU passes up to fused TIR: the stage tuning tasks are extracted from.

    Taken from ``tvm.relax.backend.cpu_generic.pipeline`` (what ``tvm.compile`` runs for
    llvm targets); ``relax.pipeline.dataflow_lower_passes`` cannot be used for llvm in 0.27
    (cpu_generic does not export it), so guard reads the module the default pipeline reads.
    """
    from tvm.relax.backend.cpu_generic import pipeline as cpu

    return [*cpu.library_dispatch_passes(target), *cpu.legalize_passes(target)]


def prepare(mod: Any, target: Any) -> Any:
    """Dispatch, legalise, fold and fuse ``mod`` for ``target`` (TVM's default CPU stages)."""
    import tvm

    with target:
        return tvm.transform.Sequential(prepare_passes(target))(mod)


def extract_tasks(prepared: Any, target: Any) -> list[Any]:
    from tvm.s_tir import meta_schedule as ms

    return list(ms.relax_integration.extract_tasks(prepared, target))


# -- cache look-up ---------------------------------------------------------------------------


def db_paths(db_dir: Path) -> tuple[Path, Path]:
    return db_dir / "database_workload.json", db_dir / "database_tuning_record.json"


def db_sha256(db_dir: Path) -> str:
    """sha256 over the database files' names and bytes, in sorted name order."""
    h = hashlib.sha256()
    for name in sorted(DB_FILES):
        h.update(name.encode() + b"\0")
        h.update((db_dir / name).read_bytes())
    return h.hexdigest()


def open_db(db_dir: Path) -> Any:
    """The JSON database at ``db_dir``, read-only in effect (guard never commits to it)."""
    from tvm.s_tir import meta_schedule as ms

    wl, rec = db_paths(db_dir)
    missing = [p.name for p in (wl, rec) if not p.is_file()]
    if missing:
        raise UsageError(
            f"tuning cache {db_dir}: missing {', '.join(missing)}",
            hint="Point tuning_cache at a MetaSchedule JSON database directory "
            "(made by guard.backends.tvm_tuning.tune).",
        )
    try:
        return ms.database.JSONDatabase(
            path_workload=str(wl), path_tuning_record=str(rec), allow_missing=False
        )
    except Exception as exc:  # noqa: BLE001 - TVM raises its own error types
        first = (str(exc).strip().splitlines() or [repr(exc)])[-1]
        raise UsageError(
            f"tuning cache {db_dir}: cannot be read: {first}",
            hint="Re-create it with guard.backends.tvm_tuning.tune.",
        ) from None


def _target_key(target: Any, drop_num_cores: bool) -> str:
    d = dict(target.export())
    if drop_num_cores:
        d.pop("num-cores", None)
    return json.dumps(d, sort_keys=True, default=str)


class TuneSummary(TypedDict):
    """What ``tune`` wrote into the database (``guard tune --db`` prints it)."""

    tasks: list[str]
    records: int
    failed_records: int
    tasks_without_valid_record: list[str]
    seconds: float
    target: str
    tvm_version: str


def _mean(xs: Iterable[Any]) -> float:
    vals = [float(x) for x in xs]
    return sum(vals) / len(vals) if vals else float("inf")


def _valid(record: Any) -> bool:
    """A record of a trial that built and ran (failed trials are stored too)."""
    return bool(record.run_secs) and _mean(record.run_secs) < FAILED_RUN_SECS


@dataclass
class Lookup:
    """Which tasks the cache covers for this target, and the in-memory database to apply."""

    path: str
    sha256: str
    entries: int
    hits: int = 0
    misses: int = 0
    missed: list[str] = field(default_factory=list)
    hit: list[str] = field(default_factory=list)
    other_target: int = 0  # misses whose workload is in the cache, tuned for another target
    failed_only: int = 0  # misses whose workload and target are there, with failed trials only
    failed_records: int = 0  # records of trials that failed to build or run
    tuned_num_cores: list[int] = field(default_factory=list)
    database: Any = None  # ms.database.MemoryDatabase holding only the matching records

    def to_dict(self) -> TuningObservations:
        return {
            "path": self.path,
            "sha256": self.sha256,
            "entries": self.entries,
            "hits": self.hits,
            "misses": self.misses,
            "missed": self.missed[:MAX_MISSED_LISTED],
            "misses_tuned_for_other_target": self.other_target,
            "misses_failed_trials_only": self.failed_only,
            "failed_records": self.failed_records,
            "tuned_num_cores": self.tuned_num_cores,
        }


def lookup(db_dir: Path, tasks: list[Any], target: Any, target_has_num_cores: bool) -> Lookup:
    """Match every task against the cache by workload (structural) and target."""
    import tvm_ffi
    from tvm.s_tir import meta_schedule as ms

    db_dir = Path(db_dir)
    sha = db_sha256(db_dir) if all((db_dir / n).is_file() for n in DB_FILES) else ""
    db = open_db(db_dir)
    records = list(db.get_all_tuning_records())
    out = Lookup(
        path=str(db_dir),
        sha256=sha,
        entries=len(records),
        failed_records=sum(1 for r in records if not _valid(r)),
    )
    want = _target_key(target, drop_num_cores=not target_has_num_cores)
    by_hash: dict[int, list] = {}
    for r in records:
        by_hash.setdefault(tvm_ffi.structural_hash(r.workload.mod), []).append(r)
    mem = ms.database.MemoryDatabase()
    cores: set[int] = set()
    for task in tasks:
        mod = task.dispatched[0]
        same_wl = [
            r
            for r in by_hash.get(tvm_ffi.structural_hash(mod), [])
            if tvm_ffi.structural_equal(r.workload.mod, mod)
        ]
        same_target = [
            r
            for r in same_wl
            if r.target is not None
            and _target_key(r.target, drop_num_cores=not target_has_num_cores) == want
        ]
        good = [r for r in same_target if _valid(r)]
        if not good:
            out.misses += 1
            out.missed.append(task.task_name)
            out.failed_only += bool(same_target)
            out.other_target += bool(same_wl) and not same_target
            continue
        best = min(good, key=lambda r: _mean(r.run_secs))
        wl = mem.commit_workload(mod)
        mem.commit_tuning_record(
            ms.database.TuningRecord(best.trace, wl, best.run_secs, best.target, best.args_info)
        )
        nc = best.target.export().get("num-cores")
        if nc is not None:
            cores.add(int(nc))
        out.hits += 1
        out.hit.append(task.task_name)
    out.tuned_num_cores = sorted(cores)
    out.database = mem
    return out


# -- tuning ----------------------------------------------------------------------------------

_PROBE = "import tvm; tvm.ir.save_json(tvm.tirx.IntImm('int32', 1)); print('ok')"


@functools.lru_cache(maxsize=1)
def serialization_ok() -> tuple[bool, str]:
    """Whether this install can serialise TIR (MetaSchedule needs it to write a database)."""
    proc = subprocess.run(
        [sys.executable, "-c", _PROBE], capture_output=True, text=True, timeout=300
    )
    if proc.returncode == 0 and "ok" in proc.stdout:
        return True, ""
    try:
        from importlib.metadata import version

        ffi = version("apache-tvm-ffi")
    except Exception:  # noqa: BLE001
        ffi = "unknown"
    why = f"signal {-proc.returncode}" if proc.returncode < 0 else f"exit {proc.returncode}"
    return False, f"tvm.ir.save_json of a TIR node dies ({why}) with apache-tvm-ffi {ffi}"


def tune(
    model_path: Path | str,
    input_shapes: dict[str, tuple[int, ...]] | dict[str, list[int]],
    target_canonical: str,
    db_dir: Path | str,
    max_trials_global: int,
    num_trials_per_iter: int = 2,
    *,
    num_cores: int | None = None,
    seed: int = 0,
    op_names: list[str] | None = None,
) -> TuneSummary:
    """Run a small MetaSchedule search for a model into the JSON database at ``db_dir``.

    Random search (``replay-trace``) with a random cost model: MetaSchedule's default
    evolutionary search needs its mutators, which crash this TVM wheel on initialisation,
    and its XGBoost cost model, which is not a dependency. Enough to make a real cache of
    real measured schedules; not a replacement for a long tuning run.
    Returns {"tasks", "records", "failed_records", "tasks_without_valid_record", "seconds",
    "target"}: a task whose trials all failed is listed, and will miss at build time.
    """
    import time

    ok, why = serialization_ok()
    if not ok:
        raise UsageError(
            f"cannot write a MetaSchedule database: {why}",
            hint="Pin apache-tvm-ffi==0.1.14.post1 (0.1.15.x crashes in ToJSONGraph "
            "with apache-tvm 0.27.0.post1).",
        )
    import tvm
    from tvm.s_tir import meta_schedule as ms

    t0 = time.perf_counter()
    db_dir = Path(db_dir)
    db_dir.mkdir(parents=True, exist_ok=True)
    target = tvm_target(target_canonical, num_cores=num_cores or host_cores())
    mod = import_onnx(Path(model_path), {k: tuple(v) for k, v in input_shapes.items()})
    tasks = extract_tasks(prepare(mod, target), target)
    if op_names:
        tasks = [t for t in tasks if any(o in t.task_name for o in op_names)]
    if not tasks:
        raise ModelError("no tuning tasks were extracted", where=str(model_path))
    contexts = []
    for i, task in enumerate(tasks):
        space = ms.space_generator.PostOrderApply(
            sch_rules="llvm", postprocs="llvm", mutator_probs={}
        )
        contexts.append(
            ms.TuneContext(
                mod=task.dispatched[0],
                target=task.target,
                space_generator=space,
                search_strategy="replay-trace",
                task_name=task.task_name,
                num_threads=1,
                rand_state=seed + i,
            )
        )
    wl, rec = db_paths(db_dir)
    database = ms.database.JSONDatabase(
        path_workload=str(wl), path_tuning_record=str(rec), allow_missing=True
    )
    with tempfile.TemporaryDirectory(prefix="guard-tvm-tune-") as work:
        ms.tune_tasks(
            tasks=contexts,
            task_weights=[float(t.weight) for t in tasks],
            work_dir=work,
            max_trials_global=max_trials_global,
            num_trials_per_iter=num_trials_per_iter,
            # Generous timeouts: on a shared 2-core machine a worker's start alone can take
            # seconds, and a timed-out trial is stored as a failure.
            builder=ms.builder.LocalBuilder(max_workers=1, timeout_sec=300),
            runner=ms.runner.LocalRunner(
                timeout_sec=300,
                evaluator_config=ms.runner.EvaluatorConfig(
                    number=3, repeat=1, min_repeat_ms=0, enable_cpu_cache_flush=False
                ),
            ),
            database=database,
            cost_model="random",
            task_scheduler="round-robin",
            measure_callbacks=[
                ms.measure_callback.AddToDatabase(),
                ms.measure_callback.RemoveBuildArtifact(),
            ],
        )
    found = lookup(db_dir, tasks, target, target_has_num_cores=True)
    return {
        "tasks": [t.task_name for t in tasks],
        "records": found.entries,
        "failed_records": found.failed_records,
        "tasks_without_valid_record": found.missed,
        "seconds": round(time.perf_counter() - t0, 3),
        "target": str(target),
        "tvm_version": tvm.__version__,
    }
