"""``guard calibrate``: the noise of every case of a suite, into the noise file.

The statistics (A/A rounds, the robust noise bound, the run noise), the noise file and its
MLflow run live in guard.stats.calibrate; this module is the command around them: it loads
the suite, builds and loads each (model, backend, target) as a guard.run.case.Case and
calibrates it against fresh loads of the same artefact (``rounds`` A/A comparisons), runs
the whole suite ``runs`` times as ``guard run`` does (round workers, interleaved rounds)
for each result's run noise, writes ``.guard/noise/<suite>.json`` and logs it.
"""

from __future__ import annotations

import io
import sys
from collections.abc import Callable
from pathlib import Path

from guard.backends import get_backend
from guard.compare.compare import round_host
from guard.core.errors import UsageError
from guard.core.json_types import JsonObject
from guard.results.documents import ResultsDocument
from guard.results.manifest import Host, Manifest
from guard.run.case import Case, prepare_cases
from guard.stats.calibrate import (
    NoiseDocument,
    NoiseEntry,
    calibrate_fn,
    default_noise_path,
    log_noise,
    run_noise_pct,
    save_noise,
)
from guard.suite import load_suite
from guard.track import check_reachable, resolve_uri


def reloader(case: Case) -> Callable[[], Callable[[], object]]:
    """Fresh sessions of a case's artefact, each a callable fed the case's inputs."""

    def reload() -> Callable[[], object]:
        session = get_backend(case.backend).load(case.artefact, case.entry.threads)
        return lambda: session.run(case.feeds)

    return reload


def run_levels(
    suite_path: Path, runs: int, workdir: Path
) -> tuple[dict[str, list[list[float]]], JsonObject, dict[str, list[list[tuple[float, ...]]]]]:
    """Each result's round medians (ms) in ``runs`` whole runs of the suite, by noise key,
    the host (the manifest Host record's JSON, unknown keys kept), and each result's
    per-round host-speed readings (ms) where every round of every one of its runs has one.

    A result that errored or was not measured in a run (emulated) is left out of it.
    """
    from rich.console import Console

    from guard.run.runner import RunOptions, run_suite

    levels: dict[str, list[list[float]]] = {}
    probes: dict[str, list[list[tuple[float, ...]] | None]] = {}
    host: JsonObject = {}
    for i in range(runs):
        quiet = Console(file=io.StringIO())  # a run's report is not calibrate's output
        raw, _ = run_suite(suite_path, RunOptions(workdir=workdir, track=False, console=quiet))
        doc = ResultsDocument.of(raw)
        if doc.interrupted:
            raise KeyboardInterrupt
        errors = [f"{r.model} [{r.backend}]" for r in doc.results if r.verdict == "error"]
        print(
            f"guard calibrate: run {i + 1} of {runs}: {len(doc.results)} results"
            + (f", errors in {', '.join(errors)} (left out)" if errors else ""),
            file=sys.stderr,
            flush=True,
        )
        for r in doc.results:
            p50s = [x.p50 for x in r.rounds]
            medians = [m for m in p50s if m is not None]
            if r.verdict == "error" or not medians or len(medians) != len(p50s):
                continue
            key = f"{r.model}/{r.backend}/{r.canonical_target}"
            levels.setdefault(key, []).append(medians)
            probes.setdefault(key, []).append(round_host(r))
            host = r.manifest.host.to_json() or host
    complete = {k: [p for p in v if p is not None] for k, v in probes.items() if None not in v}
    return levels, host, complete


def calibrate_suite(
    suite_path: Path,
    *,
    rounds: int = 20,
    round_s: float = 1.0,
    runs: int = 0,
    out: Path | None = None,
    track: bool = True,
    tracking_uri: str | None = None,
    workdir: Path | None = None,
) -> tuple[NoiseDocument, Path]:
    """Calibrate every case of a suite; write the noise file (and log it unless ``track`` is off).

    ``rounds`` A/A comparisons per case (0: none) and ``runs`` whole runs of the suite for
    the run noise (0: none). Returns the noise document and the path it was written to.
    """
    if rounds < 0 or runs < 0 or (rounds == 0 and runs == 0):
        raise UsageError(
            f"nothing to calibrate: --rounds {rounds}, --runs {runs}",
            where="guard calibrate",
            hint="Give --rounds N (A/A comparisons, >= 3) and/or --runs K (whole runs, >= 3).",
        )
    if 0 < runs < 3:
        raise UsageError(
            f"--runs must be 0 or at least 3, got {runs}",
            where="guard calibrate",
            hint="Three runs are the fewest a run-to-run spread can be estimated from.",
        )
    workdir = Path(workdir or Path.cwd())
    suite = load_suite(suite_path)
    uri = None
    if track:
        # Before minutes of measuring: a bad URI or a server that does not answer is known now.
        uri = resolve_uri(tracking_uri, workdir)
        check_reachable(uri)
    entries: dict[str, NoiseEntry] = {}
    host: JsonObject = {}
    if rounds:
        for case in prepare_cases(suite_path, workdir):
            built = Manifest.of(case.manifest)
            canonical = built.target.canonical or case.target
            entries[f"{case.model}/{case.backend}/{canonical}"] = calibrate_fn(
                case.run_once, rounds=rounds, round_s=round_s, reload=reloader(case)
            )
            host = built.host.to_json()
    if runs:
        levels, run_host, probes = run_levels(suite_path, runs, workdir)
        host = host or run_host
        for key, per_run in levels.items():
            if len(per_run) < 3:
                continue  # measured in too few of the runs to say anything
            readings = probes.get(key)
            entry: NoiseEntry = {
                "run_noise_pct": run_noise_pct(per_run, readings),
                "runs": len(per_run),
                "run_round_medians_ms": per_run,
            }
            if readings is not None:
                entry["run_host_ms"] = readings
            entries.setdefault(key, {}).update(entry)
    path = out or default_noise_path(workdir, suite.name)
    doc = save_noise(path, suite.name, entries, Host.from_json(host))
    if uri is not None:
        log_noise(uri, suite.name, doc)
    return doc, path
