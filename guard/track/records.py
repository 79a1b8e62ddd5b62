"""Turn a results document (v1) into MLflow run data: params, metrics, tags.

Pure functions over the typed results tree (guard.results; a document still as parsed JSON
is read once by each entry point), so the mapping is testable without a store. Any field
may be None or missing and unknown keys are tolerated: a None value is simply not a metric.

Keys and values are made legal for MLflow by guard.track.keys (the names readers of
records use, such as ``clean_key`` and ``target_key``, are importable from here too). A None is never written as the string ``'null'``: it is left out. A long
target string is shortened in keys (``keys.target_key``); the full string is kept as a
param.

Per (model, backend, target) *series* metrics also go on the invocation (parent) run as
``<series>/<metric>`` (:func:`series_metrics`), so MLflow's own chart view plots one series
across invocations; MLflow groups charts by the prefix before ``/``.
"""

from __future__ import annotations

import getpass
import hashlib
import json
import math
import os
import statistics
from collections.abc import Mapping
from datetime import datetime
from typing import Any

from guard.results.documents import ResultsDocument
from guard.results.manifest import Manifest
from guard.results.record import Record
from guard.results.result import Result
from guard.track.keys import (
    MAX_ENTITY_KEY_LENGTH,
    as_number,
    clean_key,
    flatten,
    param_value,
    result_series,
    tag_value,
    target_key,
)

# Names of guard.track.keys that readers of records (the JUnit report, calibration, the
# tests) take from here, re-exported explicitly.
from guard.track.keys import MAX_PARAM_VAL_LENGTH as MAX_PARAM_VAL_LENGTH
from guard.track.keys import MAX_TAG_VAL_LENGTH as MAX_TAG_VAL_LENGTH
from guard.track.keys import series_key as series_key

# Raw per-iteration samples go in as the history of one metric (step = iteration index).
# A fast model produces tens of thousands, and each point is a row in the store (~0.1 ms
# each into sqlite here), so long runs are thinned to an even stride that still spans the
# whole run. The full list stays in result.json.
MAX_SAMPLE_STEPS = 2_000

_VERDICT_ORDER = ("error", "fail", "inconclusive", "pass")
FAILED_STATUSES = ("fail", "error")


def manifest_params(manifest: Manifest | None) -> dict[str, str]:
    """The flattened manifest as params: every pin becomes a comparable column.

    None leaves are left out (MLflow would show the string 'null'); so are empty sections.
    """
    params: dict[str, str] = {}
    # every pin, whatever the backend called it: the manifest's JSON, flattened
    for key, value in flatten(manifest.to_json() if manifest is not None else {}):
        if value is None or (isinstance(value, Mapping | list) and not value):
            continue
        params.setdefault(clean_key(key), param_value(value))
    return params


# The per-result metrics that are also written on the parent, one column per series.
SERIES_METRICS = (
    "latency_ms.p10",
    "latency_ms.p50",
    "latency_ms.p90",
    "latency_ms.p99",
    "arena_bytes",
    "partitions.count",
    "numerics.max_abs_err",
    "checks.failed",
    "counted.instructions",
    "counted.bytes_moved",
)
# The tag that holds a result's counted fingerprint (JSON, guard.counting.count).
COUNTED_FINGERPRINT_TAG = "guard.counted.fingerprint"


def series_metrics(doc: ResultsDocument) -> dict[str, float]:
    """``<series>/<metric>`` for every result of an invocation (for MLflow's chart view)."""
    out: dict[str, float] = {}
    for result in doc.results:
        metrics = result_metrics(result)
        series = result_series(result)
        for name in SERIES_METRICS:
            if name in metrics:
                # clean_key would turn the "/" into "_": both halves are clean already.
                out[f"{series[: MAX_ENTITY_KEY_LENGTH - len(name) - 1]}/{name}"] = metrics[name]
    return out


def series_params(doc: ResultsDocument) -> dict[str, str]:
    """The full target string of every shortened target key (``target.<key>``)."""
    out: dict[str, str] = {}
    for result in doc.results:
        if result.target:
            key = target_key(result.target)
            if key != result.target:
                out[clean_key(f"target.{key}")] = param_value(result.target)
    return out


def _percentile(samples: list[float], q: int) -> float | None:
    if len(samples) < 2:
        return None
    return statistics.quantiles(samples, n=100, method="inclusive")[q - 1]


def _numeric_leaves(block: Record | Mapping[str, int] | None, prefix: str) -> dict[str, float]:
    """Every number in a block, by its dotted key: the fields guard knows and any a later
    contract adds (the block's JSON, flattened)."""
    if block is None:
        return {}
    tree = block.to_json() if isinstance(block, Record) else block
    out: dict[str, float] = {}
    for key, value in flatten(tree, prefix):
        number = as_number(value)
        if number is not None:
            out.setdefault(clean_key(key), number)
    return out


def tuning_hit_rate(result: Result) -> float | None:
    """Hits / (hits + misses) of the tuning cache, when the backend reports them."""
    if as_number(result.tuning.hit_rate) is not None:
        return as_number(result.tuning.hit_rate)
    cache = result.manifest.tuning_cache
    hits, misses = as_number(cache.hits), as_number(cache.misses)
    if hits is None or misses is None or hits + misses <= 0:
        return None
    return hits / (hits + misses)


def result_metrics(result: Result) -> dict[str, float]:
    """Scalar metrics of one result: latency, numerics errors, partitions, arena, tuning."""
    metrics: dict[str, float] = {}
    blocks: tuple[tuple[str, Record | None], ...] = (
        ("latency_ms", result.latency_ms),
        ("numerics", result.numerics),
        ("partitions", result.partitions),
        ("preflight", result.preflight),
        ("contention", result.contention),
    )
    for name, block in blocks:
        metrics.update(_numeric_leaves(block, name))
    if "latency_ms.p10" not in metrics and result.latency_ms is not None:
        # The lower edge of the band a dashboard draws around p50; results store p90 and up.
        samples = [n for n in map(as_number, result.samples_ms) if n is not None]
        p10 = _percentile(samples, 10)
        if p10 is not None:
            metrics["latency_ms.p10"] = p10
    for key, value in (
        ("arena_bytes", result.arena_bytes),
        ("arena_lower_bound_bytes", result.arena_lower_bound_bytes),
    ):
        number = as_number(value)
        if number is not None:
            metrics[key] = number
    arena, bound = metrics.get("arena_bytes"), metrics.get("arena_lower_bound_bytes")
    if arena is not None and bound:
        metrics["arena_over_lower_bound"] = arena / bound
    metrics.update(_numeric_leaves(result.manifest.tuning_cache, "tuning"))
    rate = tuning_hit_rate(result)
    if rate is not None:
        metrics["tuning.hit_rate"] = rate
    graph = result.graph
    if graph is not None:
        for side, ops in (
            ("ops_before", graph.ops_before),
            ("ops_after", graph.ops_after),
            ("added", graph.added),
        ):
            counts = _numeric_leaves(ops, f"graph.{side}")
            if counts:
                metrics[f"graph.{side}_total"] = sum(counts.values())
        if graph.passes is not None:
            changed = [p for p in graph.passes if p.changed]
            metrics["graph.passes_changed"] = float(len(changed))
    counted = result.counted
    if counted is not None and not counted.failed:
        c = counted
        metrics.update(_figures("counted", instructions=c.instructions, bytes_loaded=c.bytes_loaded,
                                bytes_stored=c.bytes_stored, loads=c.loads, stores=c.stores,
                                wall_s=c.wall_s))  # fmt: skip
        if "counted.bytes_loaded" in metrics and "counted.bytes_stored" in metrics:
            moved = metrics["counted.bytes_loaded"] + metrics["counted.bytes_stored"]
            metrics["counted.bytes_moved"] = moved
    q = result.quantization  # an int8 row of a quantize: model (guard.run.int8)
    if q is not None:
        metrics.update(_figures("quantization", sqnr_db=q.sqnr_db,
                                top1_agreement=q.top1_agreement, top1_drop=q.top1_drop))  # fmt: skip
    metrics["checks.total"] = float(len(result.checks))
    metrics["checks.failed"] = float(len(failed_checks(result)))
    # Unknown top-level numbers (a later contract's fields) are kept, not dropped: every
    # top-level number of the result's JSON, whatever its name.
    for key, value in result.to_json().items():
        number = as_number(value)
        if number is not None and key not in ("schema_version",):
            metrics.setdefault(clean_key(key), number)
    return metrics


def _figures(prefix: str, **figures: float | None) -> dict[str, float]:
    """``prefix.name`` for each figure that is a finite number, in order."""
    return {f"{prefix}.{k}": n for k, v in figures.items() if (n := as_number(v)) is not None}


def sample_history(result: Result) -> list[tuple[int, float]]:
    """(iteration, ms) pairs of the raw samples, thinned to at most MAX_SAMPLE_STEPS."""
    samples = result.samples_ms
    if not samples:
        return []
    stride = -(-len(samples) // MAX_SAMPLE_STEPS)
    pairs = ((i, as_number(samples[i])) for i in range(0, len(samples), stride))
    return [(i, n) for i, n in pairs if n is not None and math.isfinite(n)]


def failed_checks(result: Result) -> list[str]:
    return [str(c.name) for c in result.checks if c.status in FAILED_STATUSES]


def worst_verdict(verdicts: list[Any]) -> str:
    """error > fail > inconclusive > pass; an empty run is 'pass', an unknown word 'error'."""
    seen = {v if v in _VERDICT_ORDER else "error" for v in verdicts}
    return next((v for v in _VERDICT_ORDER if v in seen), "pass")


def child_name(result: Result) -> str:
    """``model/backend/target``; a target over 64 characters is shortened (target_key)."""
    target = result.target or "?"
    if len(target) > 64:
        target = target_key(target)
    return "/".join([result.model or "?", result.backend or "?", target])


def child_tags(result: Result, doc: ResultsDocument) -> dict[str, str]:
    manifest = result.manifest
    tags = {
        "guard.level": "result",
        "guard.suite": doc.suite,
        "guard.model": result.model,
        "guard.backend": result.backend,
        "guard.target": result.target,
        "guard.verdict": result.verdict,
        "guard.failed_checks": ",".join(failed_checks(result)),
        "guard.manifest_sha256": manifest.sha256,
        "guard.artefact": result.artefact,
        "guard.git.commit": doc.git.commit,
        "guard.git.branch": doc.git.branch,
        "guard.series": result_series(result),
        # An error result has no manifest: it ran on the invocation's host.
        "guard.arch": manifest.host.arch if manifest.host.read else host_arch(doc),
    }
    counted = result.counted
    if counted is not None and counted.engine:
        # Which engine counted (qemu-tcg-plugin, perf_event_open): two engines' counts of
        # one series are not comparable, so a chart can be filtered by it.
        tags["guard.counted_engine"] = counted.engine
    tags.update(system_tags(doc, child_name(result)))
    if counted is not None and counted.fingerprint.read:
        # What a count means (engine, emulator, plugin, target, inputs): the dashboard
        # draws a counted step only between points whose fingerprints agree.
        tags[COUNTED_FINGERPRINT_TAG] = json.dumps(counted.fingerprint.to_json(), sort_keys=True)
    if result.verdict == "error":
        tags["guard.error"] = result.error
    tags["mlflow.note.content"] = result_note(result)
    return {k: tag_value(v) for k, v in tags.items() if v is not None}


def user() -> str | None:
    """Who ran it: the CI actor when there is one, else the login name."""
    for var in ("GITHUB_ACTOR", "GITLAB_USER_LOGIN", "BUILDKITE_BUILD_CREATOR"):
        if os.environ.get(var):
            return os.environ[var]
    try:
        return getpass.getuser()
    except (KeyError, OSError):  # no passwd entry in some containers
        return None


def system_tags(doc: ResultsDocument, run_name: str) -> dict[str, str | None]:
    """MLflow's own tags, so its UI shows the source, user, commit and name of each run."""
    return {
        "mlflow.runName": run_name,
        "mlflow.user": doc.user or user(),
        "mlflow.source.name": doc.suite_path or f"guard run {doc.suite}",
        "mlflow.source.type": "JOB" if os.environ.get("CI") else "LOCAL",
        "mlflow.source.git.commit": doc.git.commit,
        "mlflow.source.git.branch": doc.git.branch,
    }


def host_arch(doc: ResultsDocument) -> str | None:
    """The arch the results were measured on (from a manifest, not from this machine)."""
    for result in doc.results:
        if result.manifest.host.arch:
            return result.manifest.host.arch
    return None


def parent_tags(doc: ResultsDocument, arch: str, results_sha256: str) -> dict[str, str]:
    dirty = doc.git.dirty
    tags = {
        "guard.level": "invocation",
        "guard.suite": doc.suite,
        "guard.started": doc.started,
        "guard.git.commit": doc.git.commit,
        "guard.git.branch": doc.git.branch,
        "guard.git.dirty": None if dirty is None else str(bool(dirty)).lower(),
        "guard.arch": arch,
        "guard.suite_sha256": doc.suite_sha256,
        "guard.verdict": worst_verdict([r.verdict for r in doc.results]),
        "guard.results_sha256": results_sha256,
    }
    tags.update(system_tags(doc, parent_name(doc)))
    tags["mlflow.note.content"] = invocation_note(doc)
    errors = errors_of(doc)
    if errors:
        tags["guard.error"] = "; ".join(errors)
    return {k: tag_value(v) for k, v in tags.items() if v is not None}


def parent_name(doc: ResultsDocument) -> str:
    return f"{doc.suite}@{str(doc.git.commit or 'nogit')[:10]}"


def invocation_note(doc: ResultsDocument) -> str:
    """The run description MLflow shows: what ran, at which commit, and what failed."""
    results = doc.results
    lines = [
        f"guard run of suite **{doc.suite}** at commit "
        f"`{str(doc.git.commit or 'unknown')[:12]}`: {len(results)} result(s), "
        f"verdict **{worst_verdict([r.verdict for r in results])}**.",
        "",
        "Per-series metrics are named `<model>.<backend>.<target>/<metric>`.",
    ]
    failed = [r for r in results if r.verdict in FAILED_STATUSES]
    for r in failed[:20]:
        why = str(r.error) if r.verdict == "error" else ", ".join(failed_checks(r))
        lines.append(f"- {child_name(r)}: {r.verdict} ({why})")
    unsure = [r for r in results if r.verdict == "inconclusive"]
    for r in unsure[:20]:
        lines.append(f"- {child_name(r)}: inconclusive ({inconclusive_reason(r)})")
    return "\n".join(lines)


def inconclusive_reason(result: Result) -> str:
    """Why a result is inconclusive: its inconclusive checks' messages, one after another."""
    found = [f"{c.name}: {c.message}" for c in result.checks if c.status == "inconclusive"]
    return "; ".join(found) or "no check says why"


def result_note(result: Result) -> str | None:
    """A result run's description: the error, or why it is inconclusive, or what failed."""
    verdict = result.verdict
    if verdict == "error":
        return f"**error**: {result.error}"
    if verdict == "inconclusive":
        return f"**inconclusive**: {inconclusive_reason(result)}"
    if verdict == "fail":
        msgs = [f"{c.name}: {c.message}" for c in result.checks if c.status in FAILED_STATUSES]
        return "**fail**: " + "; ".join(msgs)
    return None


def errors_of(doc: ResultsDocument) -> list[str]:
    """``model/backend/target: error`` for every result guard could not produce."""
    return [f"{child_name(r)}: {r.error}" for r in doc.results if r.verdict == "error"]


def parent_metrics(doc: ResultsDocument) -> dict[str, float]:
    results = doc.results
    metrics = {"results.total": float(len(results))}
    for verdict in _VERDICT_ORDER:
        metrics[f"results.{verdict}"] = float(sum(r.verdict == verdict for r in results))
    metrics.update(series_metrics(doc))
    return metrics


def iso_ms(value: Any) -> int | None:
    """Milliseconds since the epoch of an ISO 8601 time, or None."""
    if not isinstance(value, str) or not value:
        return None
    try:
        return int(datetime.fromisoformat(value.replace("Z", "+00:00")).timestamp() * 1000)
    except ValueError:
        return None


def result_span(result: Result, doc: ResultsDocument) -> tuple[int | None, int | None]:
    """(start, end) ms of one result's build and measurement: its own ``started`` and
    ``finished`` when the run recorded them, else the invocation's window."""
    start, end = iso_ms(result.started), iso_ms(result.finished)
    if start is None or end is None or end < start:
        start, end = iso_ms(doc.started), iso_ms(doc.finished)
    return start, end


def inputs_dataset(result: Result) -> dict[str, str] | None:
    """The model's fixed inputs as an MLflow dataset (name, digest, source, schema)."""
    model = result.manifest.model
    if not model.to_json():  # no manifest, or a manifest without its model's pins
        return None
    schema = json.dumps(dict(model.inputs or {}), sort_keys=True, default=str)
    digest = hashlib.sha256(f"{model.sha256}:{schema}".encode()).hexdigest()[:16]
    source = {"model": result.model, "model_sha256": model.sha256, "opset": model.opset}
    return {
        "name": f"{result.model} inputs"[:500],
        "digest": digest,
        "source_type": "guard",
        "source": json.dumps(source, sort_keys=True, default=str),
        "schema": schema[:1_000_000],
    }
