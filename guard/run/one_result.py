"""One result: ``begin_result`` (bind, build, load, golden), ``PendingResult.measure_round``
(one round in a worker) and ``finish_result`` (numerics, the measurement, partitions and
memory, gathered into one ``checks.Facts`` record by guard.run.facts, judged once by
``checks.evaluate`` and assembled by ``guard.checks.assemble.result_dict``, one key set for every result); the
emulated result of a foreign-architecture artefact beside it. The models and cases these
start from are guard.run.case's.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypedDict, cast

import numpy as np

from guard.checks import evaluate as ck
from guard.checks.assemble import MeasurementJson, ResultJson, result_dict
from guard.compare.crossarch import encode_outputs
from guard.core import fault
from guard.core.errors import GuardError, InternalError
from guard.core.json_types import JsonObject
from guard.golden import Golden, compare_outputs
from guard.golden.accuracy import session_accuracy
from guard.golden.numerics import NumericsJson, compare_expected
from guard.golden.produce import stale_warning
from guard.golden.store import outputs_sha256
from guard.measure import MeasureConfig, RoundTimings, Timings, measure, preflight
from guard.measure.host_speed import PROBE, read
from guard.measure.preflight import Preflight, PreflightBefore, contention_block
from guard.measure.round_runner import (
    WORKER,
    RoundJob,
    RoundWorkers,
    measuring_cpus,
    round_isolation,
)
from guard.results.documents import ResultsDocument
from guard.results.manifest import Manifest
from guard.results.result import (
    Latency,
    Partitions,
    Result,
)
from guard.run.case import Case, load_case
from guard.run.facts import (
    Known,
    against_baseline,
    count_known,
    gather_facts,
    host_arch,
    memory_budget,
)
from guard.suite import ModelEntry
from guard.suite.model import ModelSpec

# ---------------------------------------------------------------------------- one result


@dataclass
class PendingResult:
    """A result whose build, numerics and facts are in and whose rounds are still measured.

    guard.run.runner measures the rounds of all its results interleaved (round 1 of every
    result, then round 2, ...: guard.measure.round_runner says why); ``measure_round`` measures
    one and ``finish_result`` judges the result on the rounds it got.
    """

    entry: ModelEntry
    backend: str
    case: Case
    known: Known  # ck.Facts fields established before the rounds
    numerics: NumericsJson  # the result's numerics block, as it will be written
    cfg: MeasureConfig
    pre: Preflight
    isolation: str
    rounds: list[Timings] = field(default_factory=list)
    # Seconds the rounds took in all, by the measuring clock: loads, warm-ups, timed calls.
    spent_s: float = 0.0

    @property
    def out_of_time(self) -> bool:
        """The rounds so far took ``max_time_s``: the rest are not measured."""
        return bool(self.rounds) and self.spent_s >= self.cfg.max_time_s

    def wants_round(self, i: int) -> bool:
        """Round ``i`` is asked for and the result's time (``max_time_s``) is not spent.

        ``max_time_s`` bounds the whole measurement of a result, rounds included: a round
        starts only while the rounds before it took less, so a measurement ends within
        ``max_time_s`` plus one round (itself at most ``max_time_s / rounds`` of timed
        calls, its load and warm-up).
        """
        return i < self.cfg.rounds and not self.out_of_time

    def job(self) -> RoundJob:
        c = self.case
        return RoundJob(
            c.model, self.backend, self.entry.where, c.artefact, c.manifest,
            self.entry.threads, c.feeds, self.cfg,
        )  # fmt: skip

    def _session_round(self, i: int) -> Callable[[], object]:
        # Round 0 times the session already loaded; every other round is a fresh load,
        # whose first call (lazy initialisation) is untimed, as the numerics call was for
        # round 0.
        s = self.case.session
        if i > 0:
            s = self.case.reload()
            s.run(self.case.feeds)
        feeds = self.case.feeds
        return lambda: s.run(feeds)

    def measure_round(
        self,
        i: int,
        *,
        workers: RoundWorkers | None,
        clock: Callable[[], float] = time.perf_counter,
    ) -> None:
        """Measure round ``i``: in its round worker, or here when isolation is off."""
        fault.point("measure")
        t0 = clock()
        try:
            if self.isolation == WORKER and workers is not None:
                self.rounds.append(workers.measure(i, self.job()))
            else:
                probe = read if clock is time.perf_counter else None  # a fake clock: no probe
                self.rounds.append(
                    measure(self._session_round(i), self.cfg.per_round(), clock, host=probe)
                )
        finally:
            self.spent_s += clock() - t0


def begin_result(
    entry: ModelEntry,
    spec: ModelSpec,
    golden: Golden,
    golden_status: str,
    backend_name: str,
    *,
    workdir: Path,
    clock_injected: bool = False,
    baseline_given: bool = False,
    counted: Any = None,
    baseline: ResultsDocument | None = None,
    tools_missing: list[str] | None = None,
) -> PendingResult | ResultJson:
    """Build, load and check the numerics of one (model, backend): a result to measure.

    A result that is not timed here (an artefact that runs under emulation) comes back
    finished, as a result dict. ``counted`` (a CountedConfig) adds its counted figure
    (guard.run.counted), judged against ``baseline``; ``tools_missing`` collects the one
    line that says the counting tools are not installed.
    """
    case = load_case(entry, spec, golden, backend_name, workdir)
    manifest, session, feeds = case.manifest, case.session, case.feeds
    got = session.run(feeds)
    tol = ck.tolerance_bounds(entry.checks.tolerance)
    numerics = compare_outputs([np.asarray(g) for g in got], golden.output_list, **tol)
    numerics["golden_status"] = golden_status
    numerics["inputs_sha256"] = outputs_sha256(list(feeds.values()))  # the doctor compares it
    if golden_status == "stale":  # the suite's inputs changed: ask for the golden's update
        numerics["golden_stale"] = golden.meta.stale
    if entry.expected:  # test_data's output_K.pb: the second golden
        exp_tol = ck.tolerance_bounds(entry.checks.expected_tolerance())
        numerics["expected"] = compare_expected(got, entry.expected, spec.outputs, exp_tol)
    if golden.meta.model_sha256 not in (None, spec.sha256):
        numerics["golden_model_changed"] = True
    # The outputs themselves (compact), so guard compare can tell two architectures' drift.
    numerics["outputs"] = encode_outputs([np.asarray(g) for g in got], session.output_names)
    # What the checks will read of this phase; ck.Facts is built once, when the result is
    # finished (finish_result, _emulated_result), and every check evaluated then.
    pins = Manifest.of(manifest)
    known = Known(backend_name, host_arch(pins), pins.tuning_cache)
    if entry.checks.accuracy is not None:
        try:
            known.accuracy, known.accuracy_n = session_accuracy(entry, session, spec)
            numerics["accuracy"] = known.accuracy
        except GuardError as exc:
            known.accuracy_error = str(exc)
    if entry.quantize is not None:  # the int8 row: judged against its fp32 source
        from guard.run.case import source_path
        from guard.run.int8 import quantization_block

        known.quantization = quantization_block(
            entry, spec, session, feeds, source_path(entry), known.accuracy
        )
    if counted is not None:
        count_known(case, known, counted, workdir, baseline, tools_missing)
    if getattr(session, "latency_status", None) == "emulated":
        return _emulated_result(entry, backend_name, case, known, numerics, baseline_given)
    cfg = MeasureConfig.from_dict(entry.measure, where=f"{entry.where}.measure")
    return PendingResult(
        entry, backend_name, case, known, numerics, cfg, preflight(entry.threads),
        round_isolation(clock_injected),
    )  # fmt: skip


class _QuantizationExtra(TypedDict, total=False):
    quantization: JsonObject  # the Quantization record's JSON


class _CountedExtra(TypedDict, total=False):
    counted: JsonObject  # the Counted record's JSON


def _quantization_extra(facts: ck.Facts) -> _QuantizationExtra:
    """The int8 row's quantization block the checks judged, as the result writes it."""
    q = facts.quantization
    return {"quantization": q.to_json()} if q is not None and q.to_json() else {}


def _counted_extra(facts: ck.Facts) -> _CountedExtra:
    """The counted block the checks judged, as the result writes it."""
    return {"counted": facts.counted.to_json()} if facts.counted is not None else {}


def finish_result(
    p: PendingResult,
    *,
    baseline: ResultsDocument | None = None,
    noise: Mapping[str, Mapping[str, float]] | None = None,
) -> ResultJson:
    """Judge a result on the rounds it got (all of them, or fewer after an interruption)."""
    if not p.rounds:
        raise InternalError(f"{p.entry.name} [{p.backend}] has no measured round to judge")
    entry, backend_name, case, numerics = p.entry, p.backend, p.case, p.numerics
    manifest, info, session = case.manifest, case.build, case.session
    timings = RoundTimings(list(p.rounds), p.cfg)
    missing = p.cfg.rounds - len(p.rounds)
    post = preflight(entry.threads, contention=timings.contention)
    stats = timings.stats()
    parts = session.partitions()
    partitions = parts.to_dict()
    memory = session.memory()
    rounds, noise_pct = timings.rounds_dict(), timings.noise_pct()
    measurement: MeasurementJson = {
        "warmup_iters": timings.warmup_iters,
        "truncated": timings.truncated,
        "stopped_by": "max_time_s" if p.out_of_time and missing > 0 else timings.stopped_by,
        "contention": timings.contention,
        "cpu_share": timings.cpu_share,
        "preempted_fraction": timings.preempted_fraction,
        "rounds": len(p.rounds),
        "round_isolation": p.isolation,
        "host_probe": PROBE if any(t.host for t in p.rounds) else None,
        "round_order": "interleaved",
        "cpus": sorted(measuring_cpus(entry.threads) or ()) if p.isolation == WORKER else None,
        "config": dict(entry.measure),
    }
    # this result's measurement as the results file will hold it, judged against the baseline
    head = Result.from_json(
        {"manifest": manifest, "rounds": rounds, "noise_pct": noise_pct, "measurement": measurement}
    )
    bound = ck.regress_bound(entry.checks.latency, baseline is not None)
    regress, regress_reason = against_baseline(entry, backend_name, head, bound, baseline, noise)
    contention = contention_block(p.rounds)
    facts = gather_facts(
        p.known,
        numerics,
        baseline_given=baseline is not None,
        latency_ms=Latency.from_json(stats),
        truncated=timings.truncated,
        contention=contention,
        regress=regress,
        regress_reason=regress_reason,
        partitions=Partitions.from_json(partitions),
        arena_bytes=memory.arena_bytes,
        arena_lower_bound_bytes=memory.lower_bound_bytes,
        arena_budget=memory_budget(memory.extra),
    )
    # The facts after the loop (with its contention) decide the warnings; the ones from
    # before are kept as facts, not repeated as warnings.
    interrupted = (
        [
            f"stopped at max_time_s={p.cfg.max_time_s:g}s after {len(p.rounds)} of "
            f"{p.cfg.rounds} rounds (loads, warm-ups and timed calls count); raise max_time_s "
            "or lower rounds"
            if p.out_of_time
            else f"interrupted after {len(p.rounds)} of {p.cfg.rounds} rounds"
        ]
        if missing > 0
        else []
    )
    post["warnings"] = list(
        dict.fromkeys(
            [
                *post.get("warnings", []),
                *timings.warnings,
                *interrupted,
                *(f"build: {w}" for w in info.warnings),
                *stale_warning(entry, numerics),
            ]
        )
    )
    post["before"] = cast(PreflightBefore, {k: p.pre.get(k) for k in ("loadavg", "warnings")})
    kernels = getattr(session, "kernels", None)  # bundled: top generated kernels by share
    return result_dict(
        entry,
        backend_name,
        checks=ck.evaluate(entry.checks, facts),
        manifest=manifest,
        latency_ms=stats,
        latency_status="measured",
        samples_ms=[s * 1e3 for s in timings.samples_s],
        rounds=rounds,
        noise_pct=noise_pct,
        measurement=measurement,
        partitions=partitions,
        arena_bytes=memory.arena_bytes,
        arena_lower_bound_bytes=memory.lower_bound_bytes,
        memory={"how": memory.how, **memory.extra},
        numerics=numerics,
        preflight=post,
        artefact=str(case.artefact),
        artefact_reused=case.reused,
        graph=info.graph,
        layout_conversions=parts.layout_conversions,
        extra={
            "contention": contention.to_json(),
            **_quantization_extra(facts),
            **({"kernels": kernels(case.feeds)} if callable(kernels) else {}),
            **_counted_extra(facts),
        },
    )


def _emulated_result(
    entry: ModelEntry,
    backend_name: str,
    case: Case,
    known: Known,
    numerics: NumericsJson,
    baseline_given: bool,
) -> ResultJson:
    """The result of an artefact run under emulation: everything but latency is checked."""
    session: Any = case.session
    reason = str(session.latency_reason)
    parts = session.partitions()
    partitions = parts.to_dict()
    memory = session.memory()
    facts = gather_facts(
        known,
        numerics,
        baseline_given=baseline_given,
        latency_skipped=reason,
        regress_reason=reason,
        partitions=Partitions.from_json(partitions),
        arena_bytes=memory.arena_bytes,
        arena_lower_bound_bytes=memory.lower_bound_bytes,
        arena_budget=memory_budget(memory.extra),
    )
    return result_dict(
        entry,
        backend_name,
        checks=ck.evaluate(entry.checks, facts),
        manifest=case.manifest,
        latency_ms=None,
        latency_status="emulated",
        measurement={
            "emulated": True,
            "emulator": getattr(session, "emulator", None),
            "reason": reason,
        },
        partitions=partitions,
        arena_bytes=memory.arena_bytes,
        arena_lower_bound_bytes=memory.lower_bound_bytes,
        memory={"how": memory.how, **memory.extra},
        numerics=numerics,
        preflight={"warnings": [f"build: {w}" for w in case.build.warnings]},
        artefact=str(case.artefact),
        artefact_reused=case.reused,
        graph=case.build.graph,
        layout_conversions=parts.layout_conversions,
        extra={**_quantization_extra(facts), **_counted_extra(facts)},
    )
