"""Turn a results document (v1) into MLflow run data: params, metrics, tags.

Pure functions over plain dicts, so the mapping is testable without a store. Any field may
be None or missing and unknown keys are tolerated: a None value is simply not a metric.

Keys are made legal for MLflow (alphanumerics, ``_ - . space``; no ``/`` so a key never
reads as a path); values are truncated to MLflow's limits rather than rejected.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Iterator, Mapping
from typing import Any

# MLflow's limits (mlflow.utils.validation; a test pins them to the installed MLflow).
# Copied rather than imported so that importing guard.track does not import mlflow.
MAX_ENTITY_KEY_LENGTH = 250
MAX_PARAM_VAL_LENGTH = 6000
MAX_TAG_VAL_LENGTH = 8000

# Raw per-iteration samples go in as the history of one metric (step = iteration index).
# A fast model produces tens of thousands, and each point is a row in the store (~0.1 ms
# each into sqlite here), so long runs are thinned to an even stride that still spans the
# whole run. The full list stays in result.json.
MAX_SAMPLE_STEPS = 2_000

_BAD_KEY_CHARS = re.compile(r"[^\w.\- ]")
_VERDICT_ORDER = ("error", "fail", "inconclusive", "pass")
FAILED_STATUSES = ("fail", "error")


def clean_key(key: str) -> str:
    cleaned = _BAD_KEY_CHARS.sub("_", str(key)).strip(" ")
    if cleaned in ("", ".", ".."):
        cleaned = cleaned.replace(".", "_") or "_"
    return cleaned[:MAX_ENTITY_KEY_LENGTH]


def _text(value: Any) -> str:
    return value if isinstance(value, str) else json.dumps(value, sort_keys=True, default=str)


def param_value(value: Any) -> str:
    return _text(value)[:MAX_PARAM_VAL_LENGTH]


def tag_value(value: Any) -> str:
    return _text(value)[:MAX_TAG_VAL_LENGTH]


def as_number(value: Any) -> float | None:
    """A metric value, or None for anything that is not a number (bools count as 0/1)."""
    if isinstance(value, bool):
        return float(value)
    if isinstance(value, int | float):
        return float(value)
    try:  # numpy scalars and the like
        return float(value) if hasattr(value, "__float__") and not isinstance(value, str) else None
    except (TypeError, ValueError):
        return None


def flatten(tree: Any, prefix: str = "") -> Iterator[tuple[str, Any]]:
    """Dotted keys for the leaves of nested dicts; lists and scalars are leaves."""
    if isinstance(tree, Mapping):
        if not tree and prefix:
            yield prefix, tree
        for key, value in tree.items():
            yield from flatten(value, f"{prefix}.{key}" if prefix else str(key))
    elif prefix:
        yield prefix, tree


def manifest_params(manifest: Any) -> dict[str, str]:
    """The flattened manifest as params: every pin becomes a comparable column."""
    params: dict[str, str] = {}
    for key, value in flatten(manifest if isinstance(manifest, Mapping) else {}):
        params.setdefault(clean_key(key), param_value(value))
    return params


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
    for section in ("latency_ms", "numerics", "partitions", "preflight"):
        metrics.update(_numeric_leaves(result.get(section), section))
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
    return "/".join(str(result.get(k) or "?") for k in ("model", "backend", "target"))


def child_tags(result: Mapping[str, Any], doc: Mapping[str, Any]) -> dict[str, str]:
    git = doc.get("git") if isinstance(doc.get("git"), Mapping) else {}
    manifest = result.get("manifest") if isinstance(result.get("manifest"), Mapping) else {}
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
    }
    return {k: tag_value(v) for k, v in tags.items() if v is not None}


def host_arch(doc: Mapping[str, Any]) -> str | None:
    """The arch the results were measured on (from a manifest, not from this machine)."""
    for result in doc.get("results") or ():
        manifest = result.get("manifest") if isinstance(result, Mapping) else None
        host = manifest.get("host") if isinstance(manifest, Mapping) else None
        if isinstance(host, Mapping) and host.get("arch"):
            return str(host["arch"])
    return None


def parent_tags(doc: Mapping[str, Any], arch: str, results_sha256: str) -> dict[str, str]:
    git = doc.get("git") if isinstance(doc.get("git"), Mapping) else {}
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
    return {k: tag_value(v) for k, v in tags.items() if v is not None}


def parent_metrics(doc: Mapping[str, Any]) -> dict[str, float]:
    results = [r for r in doc.get("results") or () if isinstance(r, Mapping)]
    metrics = {"results.total": float(len(results))}
    for verdict in _VERDICT_ORDER:
        metrics[f"results.{verdict}"] = float(sum(r.get("verdict") == verdict for r in results))
    return metrics
