"""Join the results files of a sharded run into one, as if one process had run the suite.

``guard merge r1.json r2.json ... --json all.json``. The shards must be of one suite (same
name and file hash), one commit, one schema version and, when they record a plan, the same
plan (count and which case goes where); each case appears once. Anything else is refused
with exit 2, naming the files that disagree. The merged document is a results file (v1):
results in suite order, ``started``/``finished`` spanning the shards, the exit code a
single run would have had, and a ``merged`` block saying what it was made from. Reports,
``guard compare`` and verdicts read it as they read one run.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from guard.core.errors import UsageError
from guard.core.schema import RESULTS_SCHEMA_VERSION, section
from guard.results.load import load_results
from guard.results.result import ResultKey


def _same(docs: Sequence[tuple[Path, dict[str, Any]]], what: str, get: Any) -> None:
    """Refuse when ``get(doc)`` differs between files, naming a file of each value."""
    seen: dict[str, Path] = {}
    for path, doc in docs:
        seen.setdefault(repr(get(doc)), path)
    if len(seen) > 1:
        shown = "; ".join(f"{p}: {v}" for v, p in list(seen.items())[:4])
        raise UsageError(
            f"cannot merge results of different {what}: {shown}",
            hint="Merge only the shards of one run (same suite, commit and plan).",
        )


def _commit(doc: Mapping[str, Any]) -> Any:
    git = section(doc, "git")
    return git.get("commit")


def _shard(doc: Mapping[str, Any]) -> Mapping[str, Any]:
    return doc["shard"] if isinstance(doc.get("shard"), Mapping) else {}


def merge_documents(paths: Sequence[Path], *, allow_missing: bool = False) -> dict[str, Any]:
    """The merged results document of ``paths`` (see the module docstring)."""
    # Lazy: guard.run.runner brings the case, golden and backend layers with it, and a merge
    # needs only the exit-code rule.
    from guard.run.runner import exit_code_for

    if not paths:
        raise UsageError("nothing to merge: pass the shards' results files")
    docs = [
        (
            Path(p),
            load_results(
                p,
                hint="Pass the files each shard wrote with --json.",
                version_hint="Merge files written by one guard version.",
            ),
        )
        for p in paths
    ]
    _same(docs, "suites", lambda d: d.get("suite"))
    _same(docs, "suite files", lambda d: d.get("suite_sha256"))
    _same(docs, "commits", _commit)
    sharded = [(p, d) for p, d in docs if _shard(d)]
    if sharded and len(sharded) != len(docs):
        unsharded = next(p for p, d in docs if not _shard(d))
        raise UsageError(
            f"cannot merge a sharded run with an unsharded one: {unsharded} has "
            f"no shard block, {sharded[0][0]} has one"
        )
    if sharded:
        for p, d in sharded:
            _check_shard_block(p, _shard(d))
        _same(docs, "shard counts", lambda d: _shard(d).get("count"))
        _same(
            docs,
            "shard plans (the shards were balanced from different timings; pin them "
            "with --shard-times FILE)",
            lambda d: _shard(d).get("plan_sha256"),
        )
        _same(docs, "invocations", lambda d: _shard(d).get("invocation_id"))
        by_index: dict[Any, Path] = {}
        for p, d in docs:
            k = _shard(d).get("index")
            if k in by_index:
                raise UsageError(f"shard {k} given twice: {by_index[k]} and {p}")
            by_index[k] = p

    owner: dict[tuple[str, str, str], Path] = {}
    results: list[dict[str, Any]] = []
    for p, d in docs:
        for r in d["results"]:
            key = ResultKey.of(r).case
            if key in owner:
                raise UsageError(
                    f"case {'/'.join(key)} is in both {owner[key]} and {p}",
                    hint="Each case belongs to one shard: merge one run's shards.",
                )
            owner[key] = p
            results.append(r)

    missing_shards: list[int] = []
    order: list[tuple[str, str, str]] = []
    if sharded:
        first = _shard(sharded[0][1])
        order = [tuple(c) for c in first.get("suite_cases") or ()]
        count = int(first.get("count") or 0)
        missing_shards = sorted(
            set(range(1, count + 1)) - {_shard(d).get("index") for _, d in docs}
        )
        if missing_shards and not allow_missing:
            raise UsageError(
                f"shard(s) {', '.join(map(str, missing_shards))} of {count} missing: got "
                + ", ".join(f"{_shard(d).get('index')} ({p})" for p, d in docs),
                hint="Pass every shard's file, or --allow-missing to merge what there is "
                "(the missing cases become error results).",
            )
        for p, d in docs:
            planned = {tuple(c) for c in _shard(d).get("cases") or ()}
            for r in d["results"]:
                if planned and ResultKey.of(r).case not in planned:
                    raise UsageError(
                        f"{p} holds {'/'.join(ResultKey.of(r).case)}, which its shard "
                        f"{_shard(d).get('index')}/{count} was not planned to run"
                    )
        got = set(owner)
        for c in order:
            if c not in got:
                results.append(_missing_result(c, missing_shards))
    position = {c: i for i, c in enumerate(order)}
    results.sort(key=lambda r: position.get(ResultKey.of(r).case, len(position)))

    base = docs[0][1]
    merged: dict[str, Any] = {
        "schema_version": RESULTS_SCHEMA_VERSION,
        "suite": base.get("suite"),
        "suite_path": base.get("suite_path"),
        "suite_sha256": base.get("suite_sha256"),
        "started": min(str(d.get("started") or "") for _, d in docs) or None,
        "finished": max(str(d.get("finished") or "") for _, d in docs) or None,
        "git": _merged_git(docs),
        "results": results,
        "merged": {
            "files": [str(p) for p, _ in docs],
            "shards": [_shard(d).get("index") for _, d in docs] if sharded else None,
            "shard_count": _shard(base).get("count") if sharded else None,
            "plan_sha256": _shard(base).get("plan_sha256") if sharded else None,
            "invocation_id": _shard(base).get("invocation_id") if sharded else None,
            "missing_shards": missing_shards,
            "tracking": [d.get("tracking") for _, d in docs if d.get("tracking")],
        },
    }
    # What the results say, or more where a shard's run said more (--require-tracking and
    # tracking failed, interrupted): the code one process running every shard would give.
    shard_codes = [d["exit_code"] for _, d in docs if isinstance(d.get("exit_code"), int)]
    merged["exit_code"] = max([exit_code_for(results), *shard_codes])
    return merged


def _check_shard_block(path: Path, shard: Mapping[str, Any]) -> None:
    """The shard block a run wrote: index and count integers, cases [model, backend,
    target] triples of strings; an edited one is refused naming the field (exit 2)."""

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


def _merged_git(docs: Sequence[tuple[Path, dict[str, Any]]]) -> dict[str, Any]:
    gits = [d["git"] for _, d in docs if isinstance(d.get("git"), Mapping)]
    if not gits:
        return {"commit": None, "dirty": None, "branch": None}
    out = dict(gits[0])
    dirty = [g.get("dirty") for g in gits if g.get("dirty") is not None]
    out["dirty"] = any(dirty) if dirty else None
    return out


def _missing_result(case: tuple[str, str, str], missing: Sequence[int]) -> dict[str, Any]:
    model, backend, target = case
    msg = f"no results: its shard ({', '.join(map(str, missing))}) produced no results file"
    return {
        "model": model,
        "backend": backend,
        "target": target,
        "verdict": "error",
        "error_kind": "internal",
        "error": msg,
        "checks": [
            {"name": "run", "status": "error", "value": None, "bound": None, "message": msg}
        ],
    }
