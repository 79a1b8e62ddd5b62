"""Cases and one result: bind a model entry, build and load it, run it, judge it.

A ``Case`` is one built, loaded (model, backend, target), what ``guard ab`` and
``guard calibrate`` time. ``run_case`` produces one result of the results contract
(docs/ARCHITECTURE.md): numerics against the golden, the measurement, partitions and
memory, gathered into one ``checks.Facts`` record and judged by ``checks.evaluate``,
then assembled by ``guard.result.result_dict`` (one key set for every result).
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from guard import checks as ck
from guard import manifest as mf
from guard.backends import get_backend
from guard.backends.base import BuildInfo, Session
from guard.bench import MeasureConfig, measure_rounds, preflight
from guard.build import build_artefact
from guard.compare.crossarch import encode_outputs
from guard.errors import GuardError, ModelError
from guard.golden import Golden, compare_outputs
from guard.golden.accuracy import session_accuracy
from guard.golden.produce import ensure_golden, golden_store
from guard.model import ModelSpec, bind, load_model
from guard.result import result_dict
from guard.round_runner import PROCESS, isolated_rounds, measuring_cpus, round_isolation
from guard.suite import ModelEntry, load_suite

# ---------------------------------------------------------------------------- models


def resolve_model(entry: ModelEntry, cache_dir: Path | None = None) -> Path:
    """The .onnx file of an entry: a zoo model (built on first use) or the suite's path."""
    if entry.source.startswith("zoo:"):
        from guard import zoo  # the zoo builds models with onnx helpers: only when asked

        try:
            return zoo.model_path(entry.source[4:], cache_dir)
        except GuardError as exc:
            raise ModelError(str(exc), where=f"{entry.where}.source") from None
    return Path(entry.source)


def prepare_model(entry: ModelEntry) -> tuple[ModelSpec, Path]:
    """Load and bind an entry's model (shapes and input descriptions from the suite)."""
    path = resolve_model(entry)
    model = load_model(path)
    return bind(model, path, dict(entry.inputs), entry.where), path


# ---------------------------------------------------------------------------- cases


@dataclass
class Case:
    """One built, loaded (model, backend, target) ready to run: what ab/calibrate time."""

    model: str
    backend: str
    target: str
    entry: ModelEntry
    spec: ModelSpec
    artefact: Path
    manifest: dict[str, Any]
    build: BuildInfo
    reused: bool
    session: Session
    feeds: dict[str, np.ndarray]

    def run_once(self) -> None:
        self.session.run(self.feeds)

    def reload(self) -> Session:
        """A fresh session of the same artefact (a new round of measurement)."""
        from guard.emulate.load import load_session

        return load_session(
            get_backend(self.backend), self.artefact, self.entry.threads, self.manifest
        )


def load_case(
    entry: ModelEntry, spec: ModelSpec, golden: Golden, backend_name: str, workdir: Path
) -> Case:
    """Build (or reuse) the artefact and load it, fed with the golden's inputs.

    An artefact for an architecture this host cannot run is loaded under emulation
    (guard.emulate): its session says ``latency_status = "emulated"``.
    """
    from guard.emulate.load import load_session

    backend = get_backend(backend_name)
    art, manifest, info, reused = build_artefact(backend, entry, spec, backend_name, workdir)
    return Case(
        entry.name,
        backend_name,
        entry.target,
        entry,
        spec,
        art,
        manifest,
        info,
        reused,
        load_session(backend, art, entry.threads, manifest),
        dict(golden.inputs),
    )


def prepare_cases(suite_path: Path, workdir: Path | None = None) -> list[Case]:
    """Build and load every (model, backend, target) of a suite, with the golden's inputs.

    These cases are timed (guard ab, guard calibrate): one that only runs under emulation
    (a foreign-architecture target) is left out, with one line saying so.
    """
    import sys

    suite = load_suite(suite_path)
    workdir = Path(workdir or Path.cwd())
    store = golden_store(suite)
    out = []
    for entry in suite.models:
        spec, path = prepare_model(entry)
        golden, _ = ensure_golden(store, entry, spec, path)
        for b in entry.backends:
            case = load_case(entry, spec, golden, b, workdir)
            if getattr(case.session, "latency_status", None) == "emulated":
                print(
                    f"guard: {entry.name} [{b}] on {entry.target}: runs only under emulation "
                    "here, so it is not timed; left out",
                    file=sys.stderr,
                )
                continue
            out.append(case)
    return out


# ---------------------------------------------------------------------------- one result


def _host_arch(manifest: dict[str, Any]) -> str:
    try:
        return mf.target_arch(manifest["target"]["canonical"])
    except Exception:  # noqa: BLE001 - fall back to the host's arch
        return os.uname().machine


def _against_baseline(
    entry: ModelEntry,
    backend: str,
    head: dict[str, Any],
    bound: float | None,
    baseline: dict[str, Any] | None,
) -> tuple[dict[str, Any] | None, str | None]:
    """(comparison, None) against the --baseline results file, or (None, why not).

    ``head`` is this result's measurement as the results file will hold it (manifest,
    rounds, measurement): judged exactly as ``guard compare`` judges two files.
    """
    from guard.bench.regress import RegressConfig
    from guard.compare.compare import host_incompatibility, latency_comparison, row_key

    if baseline is None or bound is None:
        return None, None
    manifest = head["manifest"]
    key = (entry.name, backend, manifest["target"]["canonical"])
    base = next(
        (
            r
            for r in baseline.get("results", [])
            if r.get("verdict") != "error" and r.get("manifest") and row_key(r) == key
        ),
        None,
    )
    if base is None:
        return None, f"the baseline has no result for {key[0]} [{key[1]}] on this target"
    why = host_incompatibility(base["manifest"], manifest)
    if why:
        return None, f"baseline refused: {why}"
    comp, reason = latency_comparison(base, head, RegressConfig(regress_pct=bound))
    return (comp.to_dict(), None) if comp is not None else (None, reason)


def run_case(
    entry: ModelEntry,
    spec: ModelSpec,
    golden: Golden,
    golden_status: str,
    backend_name: str,
    *,
    workdir: Path,
    clock: Callable[[], float] = time.perf_counter,
    baseline: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """Build, load, check numerics, measure and judge one (model, backend): one result."""
    case = load_case(entry, spec, golden, backend_name, workdir)
    manifest, info, session, feeds = case.manifest, case.build, case.session, case.feeds
    got = session.run(feeds)
    tol = ck.tolerance_bounds(entry.checks.get("tolerance", {}))
    numerics = compare_outputs([np.asarray(g) for g in got], golden.output_list, **tol)
    numerics["golden_status"] = golden_status
    if golden.meta.get("model_sha256") not in (None, spec.sha256):
        numerics["golden_model_changed"] = True
    # The outputs themselves (compact), so guard compare can tell two architectures' drift.
    numerics["outputs"] = encode_outputs([np.asarray(g) for g in got], session.output_names)
    facts = ck.Facts(
        backend=backend_name,
        arch=_host_arch(manifest),
        numerics=numerics,
        baseline_given=baseline is not None,
        tuning=manifest.get("tuning_cache") or {},
    )
    if "accuracy" in entry.checks:
        try:
            facts.accuracy, facts.accuracy_n = session_accuracy(entry, session, spec)
            numerics["accuracy"] = facts.accuracy
        except GuardError as exc:
            facts.accuracy_error = str(exc)
    if getattr(session, "latency_status", None) == "emulated":
        return _emulated_result(entry, backend_name, case, facts, numerics)

    cfg = MeasureConfig.from_dict(entry.measure, where=f"{entry.where}.measure")
    pre = preflight(entry.threads)

    isolation = round_isolation(backend_name)

    def load(i: int) -> Callable[[], object]:
        # In-process, round 0 times the session already loaded; every other round is a
        # fresh load, whose first call (lazy initialisation) is untimed, as the numerics
        # call was for round 0.
        s = session
        if i > 0 or isolation == PROCESS:
            s = case.reload()
            s.run(feeds)
        return lambda: s.run(feeds)

    if isolation == PROCESS:
        runner = isolated_rounds(cfg, entry.name, backend_name, entry.where, entry.threads)
        timings = measure_rounds(load, cfg, clock, run_round=runner)
    else:
        timings = measure_rounds(load, cfg, clock)
    post = preflight(entry.threads, contention=timings.contention)
    stats = timings.stats()
    partitions = session.partitions().to_dict()
    memory = session.memory()
    facts.latency_ms, facts.truncated = stats, timings.truncated
    facts.partitions = partitions
    facts.arena_bytes, facts.arena_lower_bound_bytes = memory.arena_bytes, memory.lower_bound_bytes
    measured: dict[str, Any] = {
        "manifest": manifest,
        "rounds": timings.rounds_dict(),
        "noise_pct": timings.noise_pct(),
        "measurement": {
            "warmup_iters": timings.warmup_iters,
            "truncated": timings.truncated,
            "stopped_by": timings.stopped_by,
            "contention": timings.contention,
            "cpu_share": timings.cpu_share,
            "preempted_fraction": timings.preempted_fraction,
            "rounds": cfg.rounds,
            "round_isolation": isolation,
            "cpus": sorted(measuring_cpus(entry.threads) or ()) if isolation == PROCESS else None,
            "config": dict(entry.measure),
        },
    }
    bound = ck.regress_bound(entry.checks.get("latency", {}), baseline is not None)
    facts.regress, facts.regress_reason = _against_baseline(
        entry, backend_name, measured, bound, baseline
    )
    # The facts after the loop (with its contention) decide the warnings; the ones from
    # before are kept as facts, not repeated as warnings.
    post["warnings"] = list(
        dict.fromkeys(
            [*post.get("warnings", []), *timings.warnings, *(f"build: {w}" for w in info.warnings)]
        )
    )
    post["before"] = {k: pre.get(k) for k in ("loadavg", "warnings")}
    result = result_dict(
        entry,
        backend_name,
        checks=ck.evaluate(entry.checks, facts),
        manifest=manifest,
        latency_ms=stats,
        latency_status="measured",
        samples_ms=[s * 1e3 for s in timings.samples_s],
        rounds=measured["rounds"],
        noise_pct=measured["noise_pct"],
        measurement=measured["measurement"],
        partitions=partitions,
        arena_bytes=memory.arena_bytes,
        arena_lower_bound_bytes=memory.lower_bound_bytes,
        memory={"how": memory.how, **memory.extra},
        numerics=numerics,
        preflight=post,
        artefact=str(case.artefact),
        artefact_reused=case.reused,
        graph=info.graph,
    )
    kernels = getattr(session, "kernels", None)  # bundled: top generated kernels by share
    if callable(kernels):
        result["kernels"] = kernels(feeds)
    return result


def _emulated_result(
    entry: ModelEntry, backend_name: str, case: Case, facts: ck.Facts, numerics: dict[str, Any]
) -> dict[str, Any]:
    """The result of an artefact run under emulation: everything but latency is checked."""
    session: Any = case.session
    reason = str(session.latency_reason)
    partitions = session.partitions().to_dict()
    memory = session.memory()
    facts.partitions = partitions
    facts.arena_bytes, facts.arena_lower_bound_bytes = memory.arena_bytes, memory.lower_bound_bytes
    facts.latency_skipped = facts.regress_reason = reason
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
    )
