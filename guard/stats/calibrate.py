"""Noise calibration: A/A comparisons of each artefact against itself.

Every round times the artefact three ways, each for a third of ``round_s``: a block, then
a block of a freshly loaded session of the same artefact (the *sequential* ratio of their
medians: what two results files, two processes measured at different times, see) and the
two interleaved (the *paired* ratio: what ``guard ab`` sees). Over the rounds, the noise is

    noise_pct = 100 * (|median(log r)| + z_0.99 * 1.4826 * MAD(log r))

a robust one-sided 99% bound on how far an unchanged artefact's ratio wanders. The
regression test takes ``max(regress_pct, noise_pct)`` as its threshold, so a benchmark
that swings 8% between identical runs is not judged on 3%.

A third level comes from whole runs (``guard calibrate --runs K``): K runs of the suite,
each result measured in its rounds as ``guard run`` measures it, and ``run_noise_pct``, the
SD of a run's level beyond what its rounds predict (a disturbance that outlasts a run
moves all of its rounds, so the rounds cannot see it). Comparisons of two results files
add it to each side's variance (guard.stats.rounds_stats).

The noise file (``.guard/noise/<suite>.json``, schema_version 1) maps
"model/backend/target" to the levels measured; it is also logged to MLflow as a
calibration run.
The command that calibrates a whole suite (``guard calibrate``) is guard.prepare.calibrate: this
module times callables and never loads a suite or builds an artefact.
"""

from __future__ import annotations

import json
import math
import statistics
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any, TypedDict

import numpy as np

from guard.core.errors import UsageError
from guard.core.fsutil import atomic_write_text, read_bounded_text
from guard.results.manifest import Host
from guard.results.record import Json
from guard.stats.rounds_stats import log_readings, pooled_slopes
from guard.track.batch import _log_batch, metric_entities
from guard.track.client import experiment_id, experiment_name, mlflow_client, translated
from guard.track.log import _terminate
from guard.track.records import clean_key, series_key

SCHEMA_VERSION = 1
Z99 = 2.3263478740408408
Clock = Callable[[], float]


def noise_pct(ratios: Sequence[float]) -> float:
    """Robust one-sided 99% bound on |ratio - 1| of A/A comparisons, in percent."""
    logs = [math.log(r) for r in ratios if r > 0 and math.isfinite(r)]
    if len(logs) < 3:
        raise UsageError(f"noise needs at least 3 A/A rounds, got {len(logs)}")
    med = statistics.median(logs)
    mad = statistics.median(abs(x - med) for x in logs)
    return 100.0 * (abs(med) + Z99 * 1.4826 * mad)


def _block(fn: Callable[[], object], seconds: float, clock: Clock) -> list[float]:
    out: list[float] = []
    end = clock() + seconds
    while not out or clock() < end:
        t0 = clock()
        fn()
        out.append(clock() - t0)
    return out


def aa_round(
    fn: Callable[[], object],
    round_s: float,
    clock: Clock = time.perf_counter,
    other: Callable[[], object] | None = None,
) -> tuple[float, float]:
    """One A/A round: (sequential ratio of medians, median of interleaved pair ratios).

    ``other`` is the same artefact loaded again (a fresh session): two loads of one
    artefact differ by more than one load with itself (memory placement, allocator
    state), and two results files always come from two loads.
    """
    other = other or fn
    third = round_s / 3.0
    first = _block(fn, third, clock)
    second = _block(other, third, clock)
    seq = statistics.median(second) / statistics.median(first)
    pairs: list[float] = []
    end = clock() + third
    while not pairs or clock() < end:
        # alternate which runs first so a second-call-is-warmer effect cancels
        a_fn, b_fn = (fn, other) if len(pairs) % 2 == 0 else (other, fn)
        t0 = clock()
        a_fn()
        t1 = clock()
        b_fn()
        t2 = clock()
        ta, tb = (t1 - t0, t2 - t1) if a_fn is fn else (t2 - t1, t1 - t0)
        pairs.append(tb / ta)
    return seq, statistics.median(pairs)


class NoiseEntry(TypedDict, total=False):
    """One key's entry of the noise file: the A/A levels (``calibrate_fn``), the run level
    (``guard calibrate --runs``), or both."""

    noise_pct: float
    paired_noise_pct: float
    rounds: int
    round_s: float
    reloaded: bool
    sequential_ratios: list[float]
    paired_ratios: list[float]
    run_noise_pct: float
    runs: int
    run_round_medians_ms: list[list[float]]
    run_host_ms: list[Json]  # each run's per-round host-speed readings


class NoiseDocument(TypedDict):
    """The noise file (schema_version 1), as ``save_noise`` writes it."""

    schema_version: int
    suite: str
    calibrated: str
    host: Json  # the manifest's host block of the calibrated cases
    entries: dict[str, NoiseEntry]


def calibrate_fn(
    fn: Callable[[], object],
    *,
    rounds: int = 20,
    round_s: float = 1.0,
    warmup_s: float = 0.5,
    reload: Callable[[], Callable[[], object]] | None = None,
    clock: Clock = time.perf_counter,
) -> NoiseEntry:
    """Noise entry for one callable: both noise levels and the raw A/A ratios.

    With ``reload`` (returns a fresh callable for the same artefact), every round compares
    ``fn`` with a new load, so the noise includes load-to-load differences.
    """
    if rounds < 3:
        raise UsageError(f"--rounds must be >= 3, got {rounds}")
    if round_s <= 0:
        raise UsageError(f"--round-s must be > 0, got {round_s}")
    _block(fn, warmup_s, clock)
    seq, paired = [], []
    for _ in range(rounds):
        other = None
        if reload is not None:
            other = reload()
            _block(other, min(warmup_s, round_s / 3.0), clock)
        s, p = aa_round(fn, round_s, clock, other)
        seq.append(s)
        paired.append(p)
    return {
        "noise_pct": noise_pct(seq),
        "paired_noise_pct": noise_pct(paired),
        "rounds": rounds,
        "round_s": round_s,
        "reloaded": reload is not None,
        "sequential_ratios": seq,
        "paired_ratios": paired,
    }


def run_noise_pct(
    runs: Sequence[Sequence[float]], hosts: Sequence[Sequence[Any]] | None = None
) -> float:
    """The SD (%) of a whole run's level beyond what its rounds predict.

    ``runs`` holds each run's round medians. One-way random effects on their logs, by the
    method of moments: tau^2 = var(run means) - mean(within-run variance / rounds), 0 when
    the runs agree as well as their rounds say they should. ``hosts`` holds each run's
    per-round host-speed readings (guard.measure.host_speed.read: a number or a tuple of
    probes per round): then the logs are first adjusted for host speed with the pooled
    within-run slopes, as a comparison of two results files adjusts them
    (guard.stats.rounds_stats), so the run noise is what the probes cannot see.
    """
    usable = sum(1 for r in runs if len(r) >= 2)
    if usable < 3:
        raise UsageError(
            f"run noise needs at least 3 runs of at least 2 rounds, got {usable}",
            hint="Run `guard calibrate --runs 5` (or more).",
        )
    logs = [np.log(np.asarray(r, dtype=float)) for r in runs]
    df = [x.size - 1 for x in logs]
    probes = _probe_logs(hosts, logs)
    fit = pooled_slopes(logs, probes) if probes is not None else None
    if probes is not None and fit is not None:
        slopes = fit[0]
        logs = [x - p @ slopes for x, p in zip(logs, probes, strict=True)]
        df[0] -= slopes.size  # the slopes' degrees of freedom
    keep = [i for i, x in enumerate(logs) if x.size >= 2]
    means = np.array([logs[i].mean() for i in keep])
    pooled = sum(float(((logs[i] - logs[i].mean()) ** 2).sum()) for i in keep)
    s2 = pooled / max(1, sum(df[i] for i in keep))
    within = float(np.mean([s2 / logs[i].size for i in keep]))
    tau2 = max(0.0, float(means.var(ddof=1)) - within)
    return float(np.expm1(math.sqrt(tau2)) * 100.0)


def _probe_logs(hosts: Sequence[Sequence[Any]] | None, logs: list[np.ndarray]) -> list | None:
    """Each run's readings as (rounds, probes) arrays of logs, or None unless every round of
    every run has a finite positive reading of the same probes."""
    if hosts is None or len(hosts) != len(logs):
        return None
    out = [log_readings(h, x.size) for h, x in zip(hosts, logs, strict=True)]
    if any(a is None for a in out):
        return None
    return out if len({a.shape[1] for a in out if a is not None}) == 1 else None


def default_noise_path(workdir: Path, suite: str) -> Path:
    return Path(workdir) / ".guard" / "noise" / f"{suite}.json"


def save_noise(
    path: Path, suite: str, entries: Mapping[str, NoiseEntry], host: Host | None = None
) -> NoiseDocument:
    doc: NoiseDocument = {
        "schema_version": SCHEMA_VERSION,
        "suite": suite,
        "calibrated": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "host": host.to_json() if host is not None else {},
        "entries": dict(entries),
    }
    path.parent.mkdir(parents=True, exist_ok=True)
    atomic_write_text(path, json.dumps(doc, indent=2) + "\n")
    return doc


def load_noise(path: Path, kind: str = "sequential") -> dict[str, float]:
    """{"model/backend/target": noise} from a noise file; ``kind`` sequential, paired or run."""
    where = str(path)
    try:
        doc = json.loads(read_bounded_text(path))
    except FileNotFoundError:
        raise UsageError(
            "no such noise file", where=where, hint="Run `guard calibrate SUITE`."
        ) from None
    except (OSError, json.JSONDecodeError) as e:
        raise UsageError(f"unreadable noise file ({e})", where=where) from None
    return noise_entries(doc, kind, where)


def noise_entries(doc: Any, kind: str, where: str) -> dict[str, float]:
    """Validate a noise document (schema_version 1) and pick one noise level per key.

    An entry without that level (a calibration that did not measure it: ``--rounds 0`` or
    ``--runs 0``, or a file from before ``--runs``) contributes no key.
    """
    if not isinstance(doc, dict) or doc.get("schema_version") != SCHEMA_VERSION:
        raise UsageError(
            f"schema_version must be {SCHEMA_VERSION}",
            where=where,
            hint="Re-run `guard calibrate`.",
        )
    entries = doc.get("entries")
    if not isinstance(entries, dict):
        raise UsageError("key 'entries' must be a mapping", where=where)
    field = {"sequential": "noise_pct", "paired": "paired_noise_pct", "run": "run_noise_pct"}[kind]
    out = {}
    for key, e in entries.items():
        if not isinstance(e, dict):
            raise UsageError(f"entries.{key} must be a mapping", where=where)
        if field not in e:
            continue
        v = e[field]
        if isinstance(v, bool) or not isinstance(v, int | float) or not math.isfinite(v) or v < 0:
            raise UsageError(f"entries.{key}.{field} must be a number >= 0", where=where)
        out[key] = float(v)
    return out


def latest_noise(uri: str, suite: str, kind: str = "sequential") -> dict[str, float] | None:
    """The newest calibration run's noise in guard/<suite>, or None when there is none."""
    import mlflow  # heavy: only when the newest calibration is looked up

    with translated(uri, f"looking up the noise calibration of suite {suite!r}"):
        client = mlflow.MlflowClient(tracking_uri=uri)
        exp = client.get_experiment_by_name(experiment_name(suite))
        if exp is None:
            return None
        runs = client.search_runs(
            [exp.experiment_id],
            filter_string="tags.`guard.level` = 'calibration'",
            order_by=["attributes.start_time DESC"],
            max_results=1,
        )
        if not runs:
            return None
        mlflow.set_tracking_uri(uri)
        doc = mlflow.artifacts.load_dict(f"{runs[0].info.artifact_uri.rstrip('/')}/noise.json")
    return noise_entries(doc, kind, f"run:{runs[0].info.run_id}/noise.json")


def noise_metric_names(key: str) -> tuple[str, str, dict[str, str]]:
    """Metric names for one noise entry ("model/backend/target") and the params they need.

    A target is shortened by guard.track.records.target_key (a host's canonical target runs
    to ~330 characters, over MLflow's 250-character key limit); the full key is a param.
    """
    model, _, rest = key.partition("/")
    backend, _, target = rest.partition("/")
    series = series_key(model, backend, target)
    params = {clean_key(f"key.{series}"): key[:6000]}
    return f"noise_pct/{series}", f"paired_noise_pct/{series}", params


def log_noise(uri: str, suite: str, doc: NoiseDocument) -> str:
    """One calibration run in guard/<suite>: noise per key as metrics, through the batch call.

    The run ends FINISHED, or FAILED (KILLED on Ctrl-C) when anything in between fails: it
    is never left RUNNING.
    """
    from mlflow.entities import RunStatus  # heavy: only when a calibration is logged

    with translated(uri, f"logging noise calibration of suite {suite!r}"):
        client = mlflow_client(uri)
        run = client.create_run(experiment_id(client, uri, suite), run_name=f"{suite}@calibration")
        status = RunStatus.to_string(RunStatus.FAILED)
        try:
            metrics: dict[str, float] = {}
            params: dict[str, str] = {}
            for key, e in doc["entries"].items():
                seq, paired, key_params = noise_metric_names(key)
                if "noise_pct" in e:
                    metrics[seq] = e["noise_pct"]
                if "paired_noise_pct" in e:
                    metrics[paired] = e["paired_noise_pct"]
                if "run_noise_pct" in e:
                    metrics[seq.replace("noise_pct/", "run_noise_pct/", 1)] = e["run_noise_pct"]
                params.update(key_params)
            _log_batch(
                client,
                run.info.run_id,
                metric_entities(metrics),
                params=params,
                tags={"guard.level": "calibration", "guard.suite": suite},
            )
            client.log_dict(run.info.run_id, dict(doc), "noise.json")
            status = RunStatus.to_string(RunStatus.FINISHED)
        except KeyboardInterrupt:
            status = RunStatus.to_string(RunStatus.KILLED)
            raise
        finally:
            _terminate(client, run.info.run_id, status, None)
    return str(run.info.run_id)
