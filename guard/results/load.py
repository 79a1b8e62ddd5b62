"""The one loader of results files, and of comparison files.

Every reader (compare, baselines, merge, track push, shard times) reads a ``guard run
--json`` file through ``read_results`` (the typed guard.results.documents.ResultsDocument)
or ``load_results`` (the same document as parsed JSON). Both check the frame (an object of
``RESULTS_SCHEMA_VERSION`` whose ``results`` is a list of objects: guard.core.schema; a
newer version is refused, exit 2, saying which versions this guard reads), that each result
names its model, backend and target, and that a measured result's samples and rounds are
usable latencies; anything else is exit 2 naming the file and the field. Nothing is
rewritten: the record writes back the JSON it was read from (guard.results.record).
``read_comparison`` does the same for a ``guard compare --json`` file, and
``validate_shard_block`` for the shard block ``guard merge`` reads.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from guard.core.errors import UsageError
from guard.core.json_types import Json, JsonObject
from guard.core.schema import RESULTS_SCHEMA_VERSION, At, Schema, read_json, results_document
from guard.results.documents import COMPARISON_SCHEMA_VERSION, ComparisonDocument, ResultsDocument

# The host-speed probes as a round of the results file names them (guard.measure.host_speed
# takes its readings in this order).
PROBES = ("host_ms", "simd_ms")
# A result's verdict (the results contract).
VERDICTS = ("pass", "fail", "inconclusive", "error")
# Numbers readers compute with or format (compare, attribution, reports), by path in a
# result: each absent, null or a finite number; the objects on the way absent, null or an
# object. An edited file with a list there is refused naming the field, not exit 3.
NUMERIC_FIELDS: tuple[tuple[str, ...], ...] = (
    ("arena_bytes",),
    ("arena_lower_bound_bytes",),
    ("noise_pct",),
    ("partitions", "count"),
    ("partitions", "delegated_nodes"),
    ("partitions", "fallback_nodes"),
    ("numerics", "max_abs_err"),
    ("numerics", "max_rel_err"),
    ("numerics", "top1"),
    ("numerics", "accuracy"),
    ("manifest", "tuning_cache", "hits"),
    ("manifest", "tuning_cache", "misses"),
    ("manifest", "tuning_cache", "entries"),
)
# Op counts by op type (graph.ops_before, ...): absent, null or {op: integer}.
COUNT_MAPS: tuple[tuple[str, str], ...] = (
    ("graph", "ops_before"),
    ("graph", "ops_after"),
    ("graph", "added"),
)
# No latency guard measures is a million seconds: a larger one is an edited file, and
# values near the float limit overflow the statistics (1e308 squared is inf).
MAX_LATENCY_MS = 1e9

_RERUN = "Re-run `guard run --json` with this guard version."
_EDITED = "The results file was edited or truncated; re-run `guard run --json`."
_RESULTS = Schema("results", RESULTS_SCHEMA_VERSION, _RERUN)


def load_results(
    path: str | Path,
    *,
    hint: str = "Pass a `guard run --json` output.",
    version_hint: str = _RERUN,
    require_suite: bool = False,
) -> JsonObject:
    """Read and validate a results document (errors name the file and the field).

    ``hint`` is added where the file is missing or unreadable, ``version_hint`` where it is
    of another schema version; ``require_suite`` refuses a document without a suite name
    (tracking files it under the suite's experiment).
    """
    doc = read_json(path, what="results file", hint=hint)
    validate_results(doc, str(path), hint=version_hint, require_suite=require_suite)
    return doc


def read_results(
    path: str | Path,
    *,
    hint: str = "Pass a `guard run --json` output.",
    version_hint: str = _RERUN,
    require_suite: bool = False,
) -> ResultsDocument:
    """``load_results`` as the typed document."""
    return ResultsDocument.from_json(
        load_results(path, hint=hint, version_hint=version_hint, require_suite=require_suite)
    )


_COMPARISON = Schema(
    "comparison",
    COMPARISON_SCHEMA_VERSION,
    "Re-run `guard compare --json` with this guard version.",
)


def validate_comparison(doc: Any, where: str) -> JsonObject:
    """A comparison document of this version (v1 contract: ``rows`` a list of objects,
    ``manifest_diff`` an object), or exit 2 naming the file and the field."""
    at = _COMPARISON.at(where)
    out = _COMPARISON.check(doc, where)
    at.key("rows").objects(out.get("rows"))
    at.key("manifest_diff").mapping(out.get("manifest_diff"))
    return out


def read_comparison(path: str | Path) -> ComparisonDocument:
    """Read and validate a ``guard compare --json`` file, as the typed document."""
    doc = read_json(path, what="comparison file", hint="Pass a `guard compare --json` output.")
    return ComparisonDocument.from_json(validate_comparison(doc, str(path)))


def validate_results(
    doc: Any, where: str, *, hint: str = _RERUN, require_suite: bool = False
) -> None:
    """A results document of this version whose measured results have usable samples."""
    doc = results_document(doc, where, hint=hint, require_suite=require_suite)
    at = _RESULTS.at(where).key("results")
    seen: dict[tuple[str, str, str], int] = {}
    for i, r in enumerate(doc["results"]):
        if not all(isinstance(r.get(k), str) and r[k] for k in ("model", "backend", "target")):
            raise at.item(i).fail("needs model, backend and target (non-empty strings)", _EDITED)
        verdict = r.get("verdict")
        if verdict not in VERDICTS:
            raise (
                at.item(i)
                .key("verdict")
                .fail(
                    f"{verdict!r} is not a verdict (one of {', '.join(VERDICTS)})"
                    if "verdict" in r
                    else "is missing",
                    _EDITED,
                )
            )
        case = (r["model"], r["backend"], r["target"])
        if case in seen:
            raise at.item(i).fail(
                f"{'/'.join(case)} is given twice (results[{seen[case]}] and results[{i}])",
                _EDITED,
            )
        seen[case] = i
        _validate_numbers(r, at.item(i))
        _validate_samples(r, at.item(i))


def _validate_numbers(r: Mapping[str, Json], at: At) -> None:
    """NUMERIC_FIELDS: absent, null or finite numbers, inside objects (or null)."""
    for path in NUMERIC_FIELDS:
        node: Any = r
        where = at
        for depth, name in enumerate(path):
            if not isinstance(node, Mapping) or node.get(name) is None:
                break
            node, where = node[name], where.key(name)
            last = depth == len(path) - 1
            if not last and not isinstance(node, Mapping):
                raise where.fail(f"must be an object (or null), got {type(node).__name__}", _EDITED)
            if last and (
                isinstance(node, bool)
                or not isinstance(node, int | float)
                or not math.isfinite(node)
            ):
                raise where.fail(f"{node!r} is not a finite number (or null)", _EDITED)
    graph = r.get("graph")
    if graph is not None and not isinstance(graph, Mapping):
        raise at.key("graph").fail(f"must be an object (or null), got {type(graph).__name__}")
    for section, name in COUNT_MAPS:
        counts = (graph or {}).get(name) if section == "graph" else None
        if counts is None:
            continue
        where = at.key(section).key(name)
        if not isinstance(counts, Mapping) or not all(
            isinstance(v, int) and not isinstance(v, bool) for v in counts.values()
        ):
            raise where.fail("must be an object of op type -> integer count (or null)", _EDITED)


def _check_samples(values: Any, at: At) -> None:
    """A non-empty list of finite positive latencies (ms), or the error naming the item."""
    if not isinstance(values, list) or not values:
        raise at.fail("must be a non-empty list of latencies in ms", _EDITED)
    for j, x in enumerate(values):
        if not _positive(x):
            raise at.item(j).fail(
                f"{x!r} is not a finite positive latency in ms (at most {MAX_LATENCY_MS:g})",
                _EDITED,
            )


def _positive(x: Any) -> bool:
    return (
        not isinstance(x, bool)
        and isinstance(x, int | float)
        and math.isfinite(x)
        and 0 < x <= MAX_LATENCY_MS
    )


def _validate_samples(r: Mapping[str, Json], at: At) -> None:
    """A measured result's samples (and its rounds') must be usable: exit 2 naming the field."""
    if r.get("verdict") == "error" or r.get("latency_ms") is None:
        return  # nothing was measured: no samples are owed
    stats = r["latency_ms"]
    if not isinstance(stats, Mapping):
        raise at.key("latency_ms").fail("must be an object of latency statistics", _EDITED)
    for k, v in stats.items():
        if v is not None and (
            isinstance(v, bool)
            or not isinstance(v, int | float)
            or not math.isfinite(v)
            or not 0 <= v <= MAX_LATENCY_MS * (1 if k != "n" else 1e6)
        ):
            raise (
                at.key("latency_ms")
                .key(str(k))
                .fail(f"{v!r} is not a finite latency statistic", _EDITED)
            )
    if "samples_ms" in r:
        _check_samples(r["samples_ms"], at.key("samples_ms"))
    rounds = r.get("rounds")
    if rounds is None:
        return
    if not isinstance(rounds, list) or not rounds:
        raise at.key("rounds").fail("must be a non-empty list", _EDITED)
    for j, rd in enumerate(rounds):
        rat = at.key("rounds").item(j)
        if not isinstance(rd, Mapping):
            raise rat.fail("must be an object", _EDITED)
        _check_samples(rd.get("samples_ms"), rat.key("samples_ms"))
        if not _positive(rd.get("p50")):
            raise rat.key("p50").fail(
                f"{rd.get('p50')!r} is not a finite positive latency in ms", _EDITED
            )
        cpu = rd.get("cpu_ms_per_call")
        if cpu is not None and not _positive(cpu):
            raise rat.key("cpu_ms_per_call").fail(
                f"{cpu!r} is not a finite positive CPU time in ms (or null)", _EDITED
            )
        readings = rd.get("host_readings")
        if readings is not None and not (
            isinstance(readings, list)
            and all(isinstance(x, list) and x and all(_positive(v) for v in x) for x in readings)
        ):
            raise rat.key("host_readings").fail(
                "must be a list of readings, each a list of finite positive ms", _EDITED
            )
        for probe in PROBES:
            reading = rd.get(probe)
            if reading is not None and not _positive(reading):
                raise rat.key(probe).fail(
                    f"{reading!r} is not a finite positive host-speed reading in ms (or null)",
                    _EDITED,
                )


def validate_shard_block(path: Path, shard: Mapping[str, Json]) -> None:
    """The shard block a run wrote (guard merge reads it): index and count integers, cases
    [model, backend, target] triples of strings; an edited one is refused naming the field
    (exit 2)."""

    def bad(field: str, what: str) -> UsageError:
        return UsageError(
            f"shard.{field}: {what}",
            where=str(path),
            hint="The results file was edited or truncated; re-run the shard.",
        )

    for k in ("index", "count"):
        v = shard.get(k)
        if isinstance(v, bool) or not isinstance(v, int) or v < 1:
            raise bad(k, f"{v!r} is not a shard number (an integer >= 1)")
    for k in ("suite_cases", "cases"):
        cases = shard.get(k)
        if cases is None:
            continue
        if not isinstance(cases, list) or not all(
            isinstance(c, list) and len(c) == 3 and all(isinstance(x, str) for x in c)
            for c in cases
        ):
            raise bad(k, "must be a list of [model, backend, target] lists of strings")
