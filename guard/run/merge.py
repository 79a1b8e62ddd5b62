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

from collections.abc import Callable, Sequence
from pathlib import Path

from guard.core.errors import UsageError
from guard.core.json_types import JsonObject
from guard.core.schema import RESULTS_SCHEMA_VERSION
from guard.results.documents import ResultsDocument, Shard
from guard.results.load import read_results, validate_shard_block
from guard.results.result import Case, Result
from guard.run.document import MergedDocument

Docs = Sequence[tuple[Path, ResultsDocument]]


def _same(docs: Docs, what: str, get: Callable[[ResultsDocument], object]) -> None:
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


def _shard(doc: ResultsDocument) -> Shard:
    """The document's shard block (an empty one where it has none)."""
    return doc.shard if doc.shard is not None else Shard()


def _sharded(doc: ResultsDocument) -> bool:
    """Whether the document has a shard block that says anything."""
    return bool(_shard(doc).to_json())


def merge_documents(paths: Sequence[Path], *, allow_missing: bool = False) -> MergedDocument:
    """The merged results document of ``paths`` (see the module docstring)."""
    # Lazy: guard.run.runner brings the case, golden and backend layers with it, and a merge
    # needs only the exit-code rule.
    from guard.run.runner import exit_code_for

    if not paths:
        raise UsageError("nothing to merge: pass the shards' results files")
    docs = [
        (
            Path(p),
            read_results(
                p,
                hint="Pass the files each shard wrote with --json.",
                version_hint="Merge files written by one guard version.",
            ),
        )
        for p in paths
    ]
    _same(docs, "suites", lambda d: d.suite)
    _same(docs, "suite files", lambda d: d.suite_sha256)
    _same(docs, "commits", lambda d: d.git.commit)
    sharded = [(p, d) for p, d in docs if _sharded(d)]
    if sharded and len(sharded) != len(docs):
        unsharded = next(p for p, d in docs if not _sharded(d))
        raise UsageError(
            f"cannot merge a sharded run with an unsharded one: {unsharded} has "
            f"no shard block, {sharded[0][0]} has one"
        )
    if sharded:
        for p, d in sharded:
            validate_shard_block(p, _shard(d).to_json())
        _same(docs, "shard counts", lambda d: _shard(d).count)
        _same(
            docs,
            "shard plans (the shards were balanced from different timings; pin them "
            "with --shard-times FILE)",
            lambda d: _shard(d).plan_sha256,
        )
        _same(docs, "invocations", lambda d: _shard(d).invocation_id)
        by_index: dict[int | None, Path] = {}
        for p, d in docs:
            k = _shard(d).index
            if k in by_index:
                raise UsageError(f"shard {k} given twice: {by_index[k]} and {p}")
            by_index[k] = p

    owner: dict[Case, Path] = {}
    results: list[tuple[Case, Result]] = []
    for p, d in docs:
        for r in d.results:
            key = r.key.case
            if key in owner:
                raise UsageError(
                    f"case {'/'.join(key)} is in both {owner[key]} and {p}",
                    hint="Each case belongs to one shard: merge one run's shards.",
                )
            owner[key] = p
            results.append((key, r))

    missing_shards: list[int] = []
    order: list[Case] = []
    if sharded:
        first = _shard(sharded[0][1])
        order = [_case(c) for c in first.suite_cases]
        count = int(first.count or 0)
        missing_shards = sorted(set(range(1, count + 1)) - {_shard(d).index for _, d in docs})
        if missing_shards and not allow_missing:
            raise UsageError(
                f"shard(s) {', '.join(map(str, missing_shards))} of {count} missing: got "
                + ", ".join(f"{_shard(d).index} ({p})" for p, d in docs),
                hint="Pass every shard's file, or --allow-missing to merge what there is "
                "(the missing cases become error results).",
            )
        for p, d in docs:
            planned = {_case(c) for c in _shard(d).cases}
            for r in d.results:
                if planned and r.key.case not in planned:
                    raise UsageError(
                        f"{p} holds {'/'.join(r.key.case)}, which its shard "
                        f"{_shard(d).index}/{count} was not planned to run"
                    )
        got = set(owner)
        for c in order:
            if c not in got:
                results.append((c, _missing_result(c, missing_shards)))
    position = {c: i for i, c in enumerate(order)}
    results.sort(key=lambda kr: position.get(kr[0], len(position)))
    merged_results = [r for _, r in results]

    base = docs[0][1]
    merged: MergedDocument = {
        "schema_version": RESULTS_SCHEMA_VERSION,
        "suite": base.suite,
        "suite_path": base.suite_path,
        "suite_sha256": base.suite_sha256,
        "started": min(str(d.started or "") for _, d in docs) or None,
        "finished": max(str(d.finished or "") for _, d in docs) or None,
        "git": _merged_git(docs),
        "results": [r.to_json() for r in merged_results],
        "merged": {
            "files": [str(p) for p, _ in docs],
            "shards": [_shard(d).index for _, d in docs] if sharded else None,
            "shard_count": _shard(base).count if sharded else None,
            "plan_sha256": _shard(base).plan_sha256 if sharded else None,
            "invocation_id": _shard(base).invocation_id if sharded else None,
            "missing_shards": missing_shards,
            "tracking": [dict(d.tracking) for _, d in docs if d.tracking],
        },
    }
    # What the results say, or more where a shard's run said more (--require-tracking and
    # tracking failed, interrupted): the code one process running every shard would give.
    shard_codes = [d.exit_code for _, d in docs if d.exit_code is not None]
    merged["exit_code"] = max([exit_code_for(merged_results), *shard_codes])
    return merged


def _case(c: Sequence[str]) -> Case:
    """A [model, backend, target] triple of a shard block (validate_shard_block checked it)."""
    model, backend, target = c
    return (model, backend, target)


def _merged_git(docs: Docs) -> JsonObject:
    gits = [d.git for _, d in docs if d.git.read]
    if not gits:
        return {"commit": None, "dirty": None, "branch": None}
    out = gits[0].to_json()
    dirty = [g.dirty for g in gits if g.dirty is not None]
    out["dirty"] = any(dirty) if dirty else None
    return out


def _missing_result(case: Case, missing: Sequence[int]) -> Result:
    """The error result of a case whose shard wrote no results file, as ``guard merge``
    writes it."""
    model, backend, target = case
    msg = f"no results: its shard ({', '.join(map(str, missing))}) produced no results file"
    return Result.from_json(
        {
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
    )
