"""The run: suite → (model, backend) cases → results document → reports, MLflow, exit code.

``run_suite`` is what ``guard run`` calls. For every selected (model, backend) of the suite
it binds the model, fetches or creates its golden, builds and checks it
(``guard.run.one_result.begin_result``); then it measures the rounds of all results interleaved,
round 1 of each before round 2 of any, each round in a round worker of its own
(guard.measure.round_runner), and judges each result (``finish_result``). A model that cannot be
used becomes an ``error`` result and the run goes on: nothing already measured is lost. The reports asked for are
on disk before tracking is tried, and results that cannot be logged are kept locally for
``guard track push`` (guard.run.deliver).
"""

from __future__ import annotations

import datetime as _dt
import os
import subprocess
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from guard import report, track
from guard.checks.assemble import ResultJson, error_result
from guard.core.errors import (
    EXIT_BAD_INPUT,
    EXIT_CHECK_FAILED,
    EXIT_INTERNAL,
    EXIT_OK,
    GuardError,
    UsageError,
)
from guard.core.schema import RESULTS_SCHEMA_VERSION
from guard.core.supported import outside_range, warning_line
from guard.golden.produce import ensure_golden, golden_store
from guard.measure import MeasureConfig, set_threads
from guard.measure.round_runner import WORKER, RoundWorkers, round_isolation, worker_count
from guard.results.documents import Git, ResultsDocument
from guard.results.result import Result
from guard.run.case import prepare_model
from guard.run.counted import counted_config
from guard.run.deliver import Interruption, finish, outputs, say
from guard.run.document import RunDocument, RunHead, ShardBlock
from guard.run.one_result import PendingResult, begin_result, finish_result
from guard.run.shard import parse_shard, shard_work
from guard.run.stream import InProgress, batch_size, batches
from guard.stats.calibrate import default_noise_path, load_noise
from guard.suite import ModelEntry, Suite, load_suite

if TYPE_CHECKING:
    from rich.console import Console

_wall = time.perf_counter  # case durations (not measurements: those use RunOptions.clock)


@dataclass
class RunOptions:
    workdir: Path = field(default_factory=Path.cwd)
    json_path: Path | None = None
    junit_path: Path | None = None
    markdown_path: Path | None = None
    html_path: Path | None = None
    tracking_uri: str | None = None
    track: bool = True
    golden_root: Path | None = None  # default: <suite dir>/goldens/<suite>
    clock: Callable[[], float] = time.perf_counter
    console: Console | None = None  # None: the default console (stderr for warnings)
    models: tuple[str, ...] = ()  # run only these models (all when empty)
    backends: tuple[str, ...] = ()  # run only these backends (all when empty)
    baseline: ResultsDocument | None = None  # a results document to judge regress_pct against
    shard: str | None = None  # "K/N": run only this shard's cases (guard.run.shard)
    shard_times: Path | None = None  # results file whose duration_s balance the shards
    invocation_id: str | None = None  # one logical invocation over all shards (else env)
    require_tracking: bool = False  # tracking that fails is exit 2 (else a warning, results kept)
    counted: bool = False  # --counted: every result gets its counted figure (guard.run.counted)
    counted_engine: str | None = None  # --counted-engine: overrides measure.counted.engine
    tools_missing: list[str] = field(default_factory=list)  # why counting could not run


def git_info(cwd: Path) -> Git:
    """The checkout at ``cwd`` (commit, dirty, branch; all null outside one), read from
    the ``git`` block the results document writes (every key, in this order)."""

    def git(*args: str) -> str | None:
        try:
            out = subprocess.run(
                ["git", *args], cwd=cwd, capture_output=True, text=True, timeout=10
            )
        except (OSError, subprocess.SubprocessError):
            return None
        return out.stdout.strip() if out.returncode == 0 else None

    commit = git("rev-parse", "HEAD")
    if commit is None:
        return Git.from_json({"commit": None, "dirty": None, "branch": None})
    status = git("status", "--porcelain", "--untracked-files=no")
    branch = (
        os.environ.get("GITHUB_HEAD_REF")
        or os.environ.get("GITHUB_REF_NAME")
        or git("rev-parse", "--abbrev-ref", "HEAD")
    )
    return Git.from_json({"commit": commit, "dirty": bool(status), "branch": branch})


def exit_code_for(results: Sequence[Result]) -> int:
    """The exit code the results say: 3 for guard's own error, 2 for bad input, 1 for a
    failed check, else 0."""
    code = EXIT_OK
    for r in results:
        if r.verdict == "error":
            code = max(code, EXIT_BAD_INPUT if r.error_kind == "usage" else EXIT_INTERNAL)
        elif r.verdict == "fail":
            code = max(code, EXIT_CHECK_FAILED)
    return code


def _selected(suite: Suite, opts: RunOptions) -> list[tuple[ModelEntry, tuple[str, ...]]]:
    names = {m.name for m in suite.models}
    for m in opts.models:
        if m not in names:
            raise UsageError(
                f"--model {m!r}: no such model in suite {suite.name}",
                hint=f"Models: {', '.join(sorted(names))}.",
            )
    out = []
    for entry in suite.models:
        if opts.models and entry.name not in opts.models:
            continue
        backends = tuple(b for b in entry.backends if not opts.backends or b in opts.backends)
        if backends:
            out.append((entry, backends))
    if not out:
        raise UsageError(
            f"nothing to run: --backend {', '.join(opts.backends)} matches no "
            f"backend of the selected models in suite {suite.name}",
            hint="Check the suite's backends lists.",
        )
    return out


@dataclass
class _Slot:
    """One (model, backend) of the run: its result, or the result still being measured."""

    entry: ModelEntry
    backend: str
    began: str
    seconds: float  # wall time spent on it so far (what guard.run.shard balances by)
    pending: PendingResult | None = None
    result: ResultJson | None = None


def _run_work(
    work: list[tuple[ModelEntry, tuple[str, ...]]],
    store: Any,
    opts: RunOptions,
    results: list[ResultJson],
    noise: dict[str, dict[str, float]] | None = None,
    written: InProgress | None = None,
) -> None:
    """Every case of ``work`` into ``results``, a batch at a time (guard.run.stream): the
    batch built and checked in order, then measured round-robin, judged, and the results
    so far ``written``; ``noise`` is the suite's calibrated noise, for ``--baseline``.

    Round ``i`` of every result of a batch is measured before round ``i + 1`` of any, each
    by round worker ``i`` (guard.measure.round_runner), so a result's rounds span its batch
    (the whole run, for a suite of one batch). A case that fails anywhere becomes an
    ``error`` result and the run goes on. On an interruption, every result judged so far
    is kept, with the rounds it got.
    """
    injected = opts.clock is not time.perf_counter
    isolated = round_isolation(injected) == WORKER
    rounds = max((_rounds_of(e) for e, _ in work), default=0)
    total = sum(len(b) for _, b in work) * (1 + rounds)
    with report.progress(total, opts.console) as bar:
        with RoundWorkers(worker_count(rounds), _backends(work)) as workers:
            for n, batch in enumerate(batches(work, batch_size())):
                _run_batch(batch, store, opts, results, noise, bar, workers, isolated, n == 0)
                if written is not None:
                    written.write(results)


def _run_batch(
    batch: list[tuple[ModelEntry, tuple[str, ...]]],
    store: Any,
    opts: RunOptions,
    results: list[ResultJson],
    noise: dict[str, dict[str, float]] | None,
    bar: Any,
    workers: RoundWorkers,
    isolated: bool,
    first: bool,
) -> None:
    """One batch of models: built, measured round-robin, judged, into ``results``."""
    slots: list[_Slot] = []
    injected = opts.clock is not time.perf_counter
    rounds = max((_rounds_of(e) for e, _ in batch), default=0)
    try:
        for entry, backends in batch:
            _begin(entry, backends, store, opts, slots, bar, injected)
            if isolated:  # their interpreters start while the rest builds
                workers.start([s.entry.threads for s in slots if s.pending])
        if isolated and first:
            bar.step("starting round workers")
            workers.wait_ready()
        for i in range(rounds):
            bar.step(f"round {i + 1} of {rounds}")
            for slot in slots:
                if slot.pending is None or not slot.pending.wants_round(i):
                    continue
                set_threads(slot.entry.threads)
                t0 = _wall()
                try:
                    slot.pending.measure_round(i, workers=workers, clock=opts.clock)
                except Exception as exc:  # noqa: BLE001 - that result only
                    slot.pending, slot.result = (
                        None,
                        error_result(slot.entry, slot.backend, exc),
                    )
                slot.seconds += _wall() - t0
                bar.advance()
    finally:  # an interruption keeps every result with the rounds it got
        for slot in slots:
            _finish(slot, opts, noise or {})
        results.extend(s.result for s in slots if s.result is not None)


def _rounds_of(entry: ModelEntry) -> int:
    """The rounds a model entry asks for (0 where its measure block is invalid)."""
    try:
        return MeasureConfig.from_dict(entry.measure, where=f"{entry.where}.measure").rounds
    except GuardError:
        return 0


def _backends(work: list[tuple[ModelEntry, tuple[str, ...]]]) -> tuple[str, ...]:
    return tuple(dict.fromkeys(b for _, bs in work for b in bs))


def _begin(
    entry: ModelEntry,
    backends: tuple[str, ...],
    store: Any,
    opts: RunOptions,
    slots: list[_Slot],
    bar: Any,
    injected: bool,
) -> None:
    """Prepare one model and begin its results (build, load, numerics); errors become results."""
    set_threads(entry.threads)
    t0 = _wall()
    now = lambda: _dt.datetime.now(_dt.UTC).isoformat(timespec="milliseconds")  # noqa: E731
    began = now()
    try:
        spec, path = prepare_model(entry)
        golden, gstatus = ensure_golden(store, entry, spec, path)
    except Exception as exc:  # noqa: BLE001 - becomes an error result, run goes on
        for b in backends:
            slots.append(_Slot(entry, b, began, 0.0, result=error_result(entry, b, exc)))
            bar.advance()
        return
    # Preparation is shared by the model's backends: each carries its share.
    prep_s = (_wall() - t0) / len(backends)
    for b in backends:
        counting = opts.counted or "counted" in entry.measure
        bar.step(
            f"{entry.name} [{b}]" + (": build, check, count under the emulator" if counting else "")
        )
        t1 = _wall()
        slot = _Slot(entry, b, began if b == backends[0] else now(), prep_s)
        try:
            got = begin_result(
                entry, spec, golden, gstatus, b, workdir=opts.workdir,
                clock_injected=injected, baseline_given=opts.baseline is not None,
                counted=counted_config(entry, opts.counted, opts.counted_engine),
                baseline=opts.baseline,
                tools_missing=opts.tools_missing,
            )  # fmt: skip
        except Exception as exc:  # noqa: BLE001
            got = error_result(entry, b, exc)
        if isinstance(got, PendingResult):
            slot.pending = got
        else:
            slot.result = got
        slot.seconds += _wall() - t1
        slots.append(slot)
        bar.advance()


def baseline_noise(workdir: Path, suite: str) -> dict[str, dict[str, float]]:
    """The suite's calibrated noise (``guard calibrate``'s file in ``workdir``) by
    "model/backend/target": what ``--baseline`` judges with, as ``guard compare`` does."""
    path = default_noise_path(workdir, suite)
    if not path.is_file():
        return {}
    out: dict[str, dict[str, float]] = {}
    for kind, name in (("sequential", "noise_pct"), ("run", "run_noise_pct")):
        for key, value in load_noise(path, kind).items():
            out.setdefault(key, {})[name] = value
    return out


def _finish(slot: _Slot, opts: RunOptions, noise: dict[str, dict[str, float]]) -> None:
    """Judge a measured result (or drop one interrupted before its first round)."""
    p, slot.pending = slot.pending, None
    t0 = _wall()
    if p is not None:
        if not p.rounds:
            return  # interrupted before it was measured: nothing of it to report
        try:
            slot.result = finish_result(p, baseline=opts.baseline, noise=noise)
        except Exception as exc:  # noqa: BLE001
            slot.result = error_result(slot.entry, slot.backend, exc)
    if slot.result is None:
        return
    slot.seconds += _wall() - t0
    # The case's build, load, numerics and measurement (its MLflow run's span).
    slot.result.setdefault("duration_s", round(slot.seconds, 3))
    slot.result.setdefault("started", slot.began)
    slot.result.setdefault("finished", _dt.datetime.now(_dt.UTC).isoformat(timespec="milliseconds"))


def run_suite(suite_path: Path, opts: RunOptions | None = None) -> tuple[RunDocument, int]:
    """Run a whole suite; returns the results document and the exit code.

    Raises GuardError only for problems with the suite itself (exit 2) or the output
    paths; per-model problems become ``error`` results.
    """
    opts = opts or RunOptions()
    if opts.shard is not None:
        parse_shard(opts.shard)  # a bad K/N is refused before anything runs
    suite = load_suite(suite_path)
    work = _selected(suite, opts)
    report.check_outputs(outputs(opts))  # a bad output path is exit 2 now, not after the whole run
    uri = track.resolve_uri(opts.tracking_uri, opts.workdir) if opts.track else None
    tracking_problem: str | None = None
    if uri is not None:
        try:
            track.check_reachable(uri)
        except track.StoreRefused:
            raise  # a corrupt store: the user recovers it first (exit 2), it is never replaced
        except GuardError as exc:
            tracking_problem = str(exc)
            say(f"warning: {exc} (measuring anyway; results will be kept locally)", opts.console)
        else:
            try:  # a kill left an invocation RUNNING: end it KILLED now (guard.track.recover)
                ended = track.end_dead_invocations(uri, suite.name)
            except GuardError:
                ended = []  # logging tries again, and says what fails
            if ended:
                say(
                    f"note: {len(ended)} invocation(s) of {suite.name} left RUNNING by a killed "
                    "guard ended KILLED; their results: guard track push --pending",
                    opts.console,
                )

    shard_block: ShardBlock | None = None
    if opts.shard is not None:
        work, shard_block, problem = shard_work(
            suite,
            work,
            opts.shard,
            times_path=opts.shard_times,
            uri=uri if tracking_problem is None else None,
            invocation_id=opts.invocation_id,
            git=git_info(suite.directory),
        )
        if problem is not None:
            tracking_problem = problem
            say(
                f"warning: {problem} (measuring anyway; results will be kept locally)", opts.console
            )

    # --baseline judges with the suite's calibrated noise; a bad noise file is exit 2 now
    noise = baseline_noise(opts.workdir, suite.name) if opts.baseline is not None else None
    started = _dt.datetime.now(_dt.UTC).isoformat(timespec="seconds")
    store = golden_store(suite, opts.golden_root)
    results: list[ResultJson] = []
    head: RunHead = {
        "schema_version": RESULTS_SCHEMA_VERSION,
        "suite": suite.name,
        "suite_path": str(suite.path),
        "suite_sha256": suite.sha256,
        "started": started,
        "git": git_info(suite.directory).to_json(),
    }
    unsupported = outside_range()
    if unsupported:  # measured all the same: the manifests pin the exact versions
        say(warning_line(unsupported), opts.console)
        head["unsupported_versions"] = unsupported
    # A large suite is written as it goes, a batch of models at a time (guard.run.stream).
    written = InProgress.for_run(opts.json_path, opts.workdir, head, sum(len(b) for _, b in work))
    stop = Interruption()  # SIGINT/SIGTERM end the run; what was measured is reported
    with stop:
        _run_work(work, store, opts, results, noise, written)
    written.close()
    if any(e.quantize is not None for e in suite.models):
        from guard.run.int8 import add_int8_agreement  # compares rows across targets

        add_int8_agreement(results, suite.models)
    doc: RunDocument = {
        **head,
        "finished": _dt.datetime.now(_dt.UTC).isoformat(timespec="seconds"),
        "results": results,
    }
    if shard_block is not None:
        doc["shard"] = shard_block
    typed = [Result.of(r) for r in results]
    code = exit_code_for(typed)
    for t in typed:
        if t.verdict == "error":
            say(f"guard: error: {t.model} [{t.backend}]: {t.error}", opts.console)
        elif t.counted is not None and t.counted.failed:
            say(f"guard: counted: {t.counted.error}", opts.console)
    for line in opts.tools_missing[:1]:  # the wall-time results are complete
        say(f"guard: warning: {line}; no counted figures in this run", opts.console)
    # Which engine counted and why, once per run (each count records it too).
    notes = [t.counted.engine_note if t.counted else None for t in typed]
    for note in dict.fromkeys(n for n in notes if n):
        say(f"guard: counted: {note}", opts.console)

    # Durable first: the reports are on disk before tracking is tried (guard.run.deliver).
    code = finish(
        doc,
        code,
        uri=uri,
        tracking_problem=tracking_problem,
        opts=opts,
        stop=stop,
    )
    return doc, code
