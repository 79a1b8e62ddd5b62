"""Turn a results document (v1) into MLflow run data: params, metrics, tags.

Pure functions over plain dicts, so the mapping is testable without a store. Any field may
be None or missing and unknown keys are tolerated: a None value is simply not a metric.

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

from guard.core.schema import section
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


def manifest_params(manifest: Any) -> dict[str, str]:
    """The flattened manifest as params: every pin becomes a comparable column.

    None leaves are left out (MLflow would show the string 'null'); so are empty sections.
    """
    params: dict[str, str] = {}
    for key, value in flatten(manifest if isinstance(manifest, Mapping) else {}):
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
# The per-inference counts of a counted run (guard.counting.count), logged as metrics.
COUNTED_METRICS = ("instructions", "bytes_loaded", "bytes_stored", "loads", "stores", "wall_s")


def series_metrics(doc: Mapping[str, Any]) -> dict[str, float]:
    """``<series>/<metric>`` for every result of an invocation (for MLflow's chart view)."""
    out: dict[str, float] = {}
    for result in doc.get("results") or ():
        if not isinstance(result, Mapping):
            continue
        metrics = result_metrics(result)
        series = result_series(result)
        for name in SERIES_METRICS:
            if name in metrics:
                # clean_key would turn the "/" into "_": both halves are clean already.
                out[f"{series[: MAX_ENTITY_KEY_LENGTH - len(name) - 1]}/{name}"] = metrics[name]
    return out


def series_params(doc: Mapping[str, Any]) -> dict[str, str]:
    """The full target string of every shortened target key (``target.<key>``)."""
    out: dict[str, str] = {}
    for result in doc.get("results") or ():
        if isinstance(result, Mapping) and result.get("target") is not None:
            key = target_key(result.get("target"))
            if key != str(result.get("target")):
                out[clean_key(f"target.{key}")] = param_value(result.get("target"))
    return out


def _percentile(samples: list[float], q: int) -> float | None:
    if len(samples) < 2:
        return None
    return statistics.quantiles(samples, n=100, method="inclusive")[q - 1]


def _numeric_leaves(tree: Any, prefix: str) -> dict[str, float]:
    out: dict[str, float] = {}
    for key, value in flatten(tree, prefix) if isinstance(tree, Mapping) else ():
        number = as_number(value)
        if number is not None:
            out.setdefault(clean_key(key), number)
    return out


def tuning_hit_rate(result: Mapping[str, Any]) -> float | None:
    """Hits / (hits + misses) of the tuning cache, when the backend reports them."""
    tuning = result.get("tuning")
    if isinstance(tuning, Mapping) and as_number(tuning.get("hit_rate")) is not None:
        return as_number(tuning.get("hit_rate"))
    manifest = result.get("manifest")
    cache = manifest.get("tuning_cache") if isinstance(manifest, Mapping) else None
    if not isinstance(cache, Mapping):
        return None
    hits, misses = as_number(cache.get("hits")), as_number(cache.get("misses"))
    if hits is None or misses is None or hits + misses <= 0:
        return None
    return hits / (hits + misses)


def result_metrics(result: Mapping[str, Any]) -> dict[str, float]:
    """Scalar metrics of one result: latency, numerics errors, partitions, arena, tuning."""
    metrics: dict[str, float] = {}
    for name in ("latency_ms", "numerics", "partitions", "preflight", "contention"):
        metrics.update(_numeric_leaves(result.get(name), name))
    if "latency_ms.p10" not in metrics and isinstance(result.get("latency_ms"), Mapping):
        # The lower edge of the band a dashboard draws around p50; results store p90 and up.
        samples = [n for n in map(as_number, result.get("samples_ms") or ()) if n is not None]
        p10 = _percentile(samples, 10)
        if p10 is not None:
            metrics["latency_ms.p10"] = p10
    for key in ("arena_bytes", "arena_lower_bound_bytes"):
        number = as_number(result.get(key))
        if number is not None:
            metrics[key] = number
    arena, bound = metrics.get("arena_bytes"), metrics.get("arena_lower_bound_bytes")
    if arena is not None and bound:
        metrics["arena_over_lower_bound"] = arena / bound
    manifest = result.get("manifest")
    cache = manifest.get("tuning_cache") if isinstance(manifest, Mapping) else None
    metrics.update(_numeric_leaves(cache, "tuning"))
    rate = tuning_hit_rate(result)
    if rate is not None:
        metrics["tuning.hit_rate"] = rate
    graph = result.get("graph")
    if isinstance(graph, Mapping):
        for side in ("ops_before", "ops_after", "added"):
            counts = _numeric_leaves(graph.get(side), f"graph.{side}")
            if counts:
                metrics[f"graph.{side}_total"] = sum(counts.values())
        passes = graph.get("passes")
        if isinstance(passes, list):
            changed = [p for p in passes if isinstance(p, Mapping) and p.get("changed")]
            metrics["graph.passes_changed"] = float(len(changed))
    counted = result.get("counted")
    if isinstance(counted, Mapping) and "error" not in counted:
        for key in COUNTED_METRICS:
            number = as_number(counted.get(key))
            if number is not None:
                metrics[f"counted.{key}"] = number
        if "counted.bytes_loaded" in metrics and "counted.bytes_stored" in metrics:
            moved = metrics["counted.bytes_loaded"] + metrics["counted.bytes_stored"]
            metrics["counted.bytes_moved"] = moved
    quant = result.get("quantization")  # an int8 row of a quantize: model (guard.run.int8)
    if isinstance(quant, Mapping):
        for key in ("sqnr_db", "top1_agreement", "top1_drop"):
            number = as_number(quant.get(key))
            if number is not None:
                metrics[f"quantization.{key}"] = number
    checks = [c for c in result.get("checks") or () if isinstance(c, Mapping)]
    metrics["checks.total"] = float(len(checks))
    metrics["checks.failed"] = float(len(failed_checks(result)))
    # Unknown top-level numbers (a later contract's fields) are kept, not dropped.
    for key, value in result.items():
        number = as_number(value)
        if number is not None and key not in ("schema_version",):
            metrics.setdefault(clean_key(key), number)
    return metrics


def sample_history(result: Mapping[str, Any]) -> list[tuple[int, float]]:
    """(iteration, ms) pairs of the raw samples, thinned to at most MAX_SAMPLE_STEPS."""
    samples = result.get("samples_ms")
    if not isinstance(samples, list) or not samples:
        return []
    stride = -(-len(samples) // MAX_SAMPLE_STEPS)
    pairs = ((i, as_number(samples[i])) for i in range(0, len(samples), stride))
    return [(i, n) for i, n in pairs if n is not None and math.isfinite(n)]


def failed_checks(result: Mapping[str, Any]) -> list[str]:
    return [
        str(c.get("name"))
        for c in result.get("checks") or ()
        if isinstance(c, Mapping) and c.get("status") in FAILED_STATUSES
    ]


def worst_verdict(verdicts: list[Any]) -> str:
    """error > fail > inconclusive > pass; an empty run is 'pass', an unknown word 'error'."""
    seen = {v if v in _VERDICT_ORDER else "error" for v in verdicts}
    return next((v for v in _VERDICT_ORDER if v in seen), "pass")


def child_name(result: Mapping[str, Any]) -> str:
    """``model/backend/target``; a target over 64 characters is shortened (target_key)."""
    target = str(result.get("target") or "?")
    if len(target) > 64:
        target = target_key(target)
    return "/".join([str(result.get("model") or "?"), str(result.get("backend") or "?"), target])


def child_tags(result: Mapping[str, Any], doc: Mapping[str, Any]) -> dict[str, str]:
    git = section(doc, "git")
    manifest = section(result, "manifest")
    tags = {
        "guard.level": "result",
        "guard.suite": doc.get("suite"),
        "guard.model": result.get("model"),
        "guard.backend": result.get("backend"),
        "guard.target": result.get("target"),
        "guard.verdict": result.get("verdict"),
        "guard.failed_checks": ",".join(failed_checks(result)),
        "guard.manifest_sha256": manifest.get("sha256"),
        "guard.artefact": result.get("artefact"),
        "guard.git.commit": git.get("commit"),
        "guard.git.branch": git.get("branch"),
        "guard.series": result_series(result),
        # An error result has no manifest: it ran on the invocation's host.
        "guard.arch": (manifest.get("host") or {}).get("arch")
        if isinstance(manifest.get("host"), Mapping)
        else host_arch(doc),
    }
    counted = result.get("counted")
    if isinstance(counted, Mapping) and counted.get("engine"):
        # Which engine counted (qemu-tcg-plugin, perf_event_open): two engines' counts of
        # one series are not comparable, so a chart can be filtered by it.
        tags["guard.counted_engine"] = counted["engine"]
    tags.update(system_tags(doc, child_name(result)))
    counted = result.get("counted")
    if isinstance(counted, Mapping) and isinstance(counted.get("fingerprint"), Mapping):
        # What a count means (engine, emulator, plugin, target, inputs): the dashboard
        # draws a counted step only between points whose fingerprints agree.
        tags[COUNTED_FINGERPRINT_TAG] = json.dumps(counted["fingerprint"], sort_keys=True)
    if result.get("verdict") == "error":
        tags["guard.error"] = result.get("error")
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


def system_tags(doc: Mapping[str, Any], run_name: str) -> dict[str, Any]:
    """MLflow's own tags, so its UI shows the source, user, commit and name of each run."""
    git = section(doc, "git")
    recorded = doc.get("user") if isinstance(doc.get("user"), str) else None
    return {
        "mlflow.runName": run_name,
        "mlflow.user": recorded or user(),
        "mlflow.source.name": doc.get("suite_path") or f"guard run {doc.get('suite')}",
        "mlflow.source.type": "JOB" if os.environ.get("CI") else "LOCAL",
        "mlflow.source.git.commit": git.get("commit"),
        "mlflow.source.git.branch": git.get("branch"),
    }


def host_arch(doc: Mapping[str, Any]) -> str | None:
    """The arch the results were measured on (from a manifest, not from this machine)."""
    for result in doc.get("results") or ():
        manifest = result.get("manifest") if isinstance(result, Mapping) else None
        host = manifest.get("host") if isinstance(manifest, Mapping) else None
        if isinstance(host, Mapping) and host.get("arch"):
            return str(host["arch"])
    return None


def parent_tags(doc: Mapping[str, Any], arch: str, results_sha256: str) -> dict[str, str]:
    git = section(doc, "git")
    results = [r for r in doc.get("results") or () if isinstance(r, Mapping)]
    dirty = git.get("dirty")
    tags = {
        "guard.level": "invocation",
        "guard.suite": doc.get("suite"),
        "guard.started": doc.get("started"),
        "guard.git.commit": git.get("commit"),
        "guard.git.branch": git.get("branch"),
        "guard.git.dirty": None if dirty is None else str(bool(dirty)).lower(),
        "guard.arch": arch,
        "guard.suite_sha256": doc.get("suite_sha256"),
        "guard.verdict": worst_verdict([r.get("verdict") for r in results]),
        "guard.results_sha256": results_sha256,
    }
    tags.update(system_tags(doc, parent_name(doc)))
    tags["mlflow.note.content"] = invocation_note(doc)
    errors = errors_of(doc)
    if errors:
        tags["guard.error"] = "; ".join(errors)
    return {k: tag_value(v) for k, v in tags.items() if v is not None}


def parent_name(doc: Mapping[str, Any]) -> str:
    git = section(doc, "git")
    return f"{doc.get('suite')}@{str(git.get('commit') or 'nogit')[:10]}"


def invocation_note(doc: Mapping[str, Any]) -> str:
    """The run description MLflow shows: what ran, at which commit, and what failed."""
    results = [r for r in doc.get("results") or () if isinstance(r, Mapping)]
    git = section(doc, "git")
    lines = [
        f"guard run of suite **{doc.get('suite')}** at commit "
        f"`{str(git.get('commit') or 'unknown')[:12]}`: {len(results)} result(s), "
        f"verdict **{worst_verdict([r.get('verdict') for r in results])}**.",
        "",
        "Per-series metrics are named `<model>.<backend>.<target>/<metric>`.",
    ]
    failed = [r for r in results if r.get("verdict") in FAILED_STATUSES]
    for r in failed[:20]:
        why = str(r.get("error")) if r.get("verdict") == "error" else ", ".join(failed_checks(r))
        lines.append(f"- {child_name(r)}: {r.get('verdict')} ({why})")
    unsure = [r for r in results if r.get("verdict") == "inconclusive"]
    for r in unsure[:20]:
        lines.append(f"- {child_name(r)}: inconclusive ({inconclusive_reason(r)})")
    return "\n".join(lines)


def inconclusive_reason(result: Mapping[str, Any]) -> str:
    """Why a result is inconclusive: its inconclusive checks' messages, one after another."""
    found = [
        f"{c.get('name')}: {c.get('message')}"
        for c in result.get("checks") or ()
        if isinstance(c, Mapping) and c.get("status") == "inconclusive"
    ]
    return "; ".join(found) or "no check says why"


def result_note(result: Mapping[str, Any]) -> str | None:
    """A result run's description: the error, or why it is inconclusive, or what failed."""
    verdict = result.get("verdict")
    if verdict == "error":
        return f"**error**: {result.get('error')}"
    if verdict == "inconclusive":
        return f"**inconclusive**: {inconclusive_reason(result)}"
    if verdict == "fail":
        msgs = [f"{c.get('name')}: {c.get('message')}" for c in result.get("checks") or ()
                if isinstance(c, Mapping) and c.get("status") in FAILED_STATUSES]  # fmt: skip
        return "**fail**: " + "; ".join(msgs)
    return None


def errors_of(doc: Mapping[str, Any]) -> list[str]:
    """``model/backend/target: error`` for every result guard could not produce."""
    return [
        f"{child_name(r)}: {r.get('error')}"
        for r in doc.get("results") or ()
        if isinstance(r, Mapping) and r.get("verdict") == "error"
    ]


def parent_metrics(doc: Mapping[str, Any]) -> dict[str, float]:
    results = [r for r in doc.get("results") or () if isinstance(r, Mapping)]
    metrics = {"results.total": float(len(results))}
    for verdict in _VERDICT_ORDER:
        metrics[f"results.{verdict}"] = float(sum(r.get("verdict") == verdict for r in results))
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


def result_span(result: Mapping[str, Any], doc: Mapping[str, Any]) -> tuple[int | None, int | None]:
    """(start, end) ms of one result's build and measurement: its own ``started`` and
    ``finished`` when the run recorded them, else the invocation's window."""
    start, end = iso_ms(result.get("started")), iso_ms(result.get("finished"))
    if start is None or end is None or end < start:
        start, end = iso_ms(doc.get("started")), iso_ms(doc.get("finished"))
    return start, end


def inputs_dataset(result: Mapping[str, Any]) -> dict[str, str] | None:
    """The model's fixed inputs as an MLflow dataset (name, digest, source, schema)."""
    manifest = section(result, "manifest")
    model = section(manifest, "model")
    if not model:
        return None
    inputs = model.get("inputs") or {}
    schema = json.dumps(inputs, sort_keys=True, default=str)
    digest = hashlib.sha256(f"{model.get('sha256')}:{schema}".encode()).hexdigest()[:16]
    source = {"model": result.get("model"), "model_sha256": model.get("sha256"),
              "opset": model.get("opset")}  # fmt: skip
    return {
        "name": f"{result.get('model')} inputs"[:500],
        "digest": digest,
        "source_type": "guard",
        "source": json.dumps(source, sort_keys=True, default=str),
        "schema": schema[:1_000_000],
    }
