"""Shards: a deterministic, balanced slice of a suite's (model, backend, target) cases.

``guard run SUITE --shard K/N`` runs shard K of N. Every shard computes the same plan from
the same inputs: the suite's cases in suite order, and a weight per case. Weights are the
previous run's seconds per case (``duration_s`` of a results file, or of the newest result
runs in MLflow) when known, else 1 (balance by count). A case without a time gets the
median of the known times, so a new model is neither free nor a giant.

The plan is longest-processing-time first: cases sorted by weight (descending, ties in suite
order), each given to the least loaded shard (ties to the one with fewer cases, then the
lowest index, so equal weights spread evenly). That is within 4/3 of the best possible
makespan and, unlike round-robin, does not put two slow models in one shard. Its sha256 is recorded in every shard's results, so ``guard merge`` can tell shards
planned from different timings (which could lose or repeat a case) and refuse them.
"""

from __future__ import annotations

import hashlib
import json
import os
import platform
import re
import statistics
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from guard.core.errors import GuardError, UsageError
from guard.results.documents import Git, ResultsDocument
from guard.results.load import read_results
from guard.results.result import Case
from guard.run.document import ShardBlock
from guard.suite import ModelEntry, Suite
from guard.track.index import case_times
from guard.track.invocation import ensure_invocation

_SPEC = re.compile(r"^\s*(\d+)\s*/\s*(\d+)\s*$")
MAX_SHARDS = 1024


@dataclass(frozen=True)
class ShardSpec:
    index: int  # 1-based
    count: int

    def __str__(self) -> str:
        return f"{self.index}/{self.count}"


def parse_shard(text: str) -> ShardSpec:
    """``K/N`` with 1 <= K <= N; anything else is a UsageError naming the spec."""
    m = _SPEC.match(str(text))
    if not m:
        raise UsageError(
            f"--shard {text!r}: expected K/N with whole numbers, e.g. 1/4",
            hint="K is this shard (1-based), N the number of shards.",
        )
    k, n = int(m.group(1)), int(m.group(2))
    if n < 1 or n > MAX_SHARDS:
        raise UsageError(f"--shard {text!r}: the shard count must be 1..{MAX_SHARDS}, got {n}")
    if k < 1 or k > n:
        raise UsageError(
            f"--shard {text!r}: the shard index must be 1..{n}, got {k}",
            hint="Shards are numbered from 1: --shard 1/4 ... --shard 4/4.",
        )
    return ShardSpec(k, n)


def times_from_results(doc: ResultsDocument) -> dict[Case, float]:
    """Seconds per case from a results document (``duration_s`` of each result)."""
    out: dict[Case, float] = {}
    for r in doc.results:
        d = r.duration_s
        if d is not None and d >= 0:
            out[r.key.case] = float(d)
    return out


def weights(cases: Sequence[Case], times: Mapping[Case, float] | None) -> dict[Case, float]:
    """Each case's weight: its known time, else the median known time, else 1 for all."""
    known = {c: float(times[c]) for c in cases if times and c in times}
    if not known:
        return {c: 1.0 for c in cases}
    fill = statistics.median(known.values())
    # A zero-second case still costs its process a little: never weigh it as nothing.
    floor = max(fill, 1e-3) * 1e-3
    return {c: max(known.get(c, fill), floor) for c in cases}


@dataclass(frozen=True)
class Plan:
    count: int
    cases: tuple[Case, ...]  # every case, in suite order
    assignment: tuple[int, ...]  # shard index (1-based) per case, aligned with cases
    weights: tuple[float, ...]
    source: str  # where the weights came from: "count", "results:<path>", "mlflow:<uri>"

    def shard_cases(self, index: int) -> list[Case]:
        return [c for c, s in zip(self.cases, self.assignment, strict=True) if s == index]

    def loads(self) -> list[float]:
        out = [0.0] * self.count
        for s, w in zip(self.assignment, self.weights, strict=True):
            out[s - 1] += w
        return out

    @property
    def sha256(self) -> str:
        """Identity of the split (which case goes where), not of the weights' exact values."""
        body = json.dumps(
            [self.count, [list(c) for c in self.cases], list(self.assignment)],
            separators=(",", ":"),
        )
        return hashlib.sha256(body.encode()).hexdigest()

    def describe(self, index: int) -> ShardBlock:
        """The ``shard`` block of a shard's results document."""
        return {
            "index": index,
            "count": self.count,
            "plan_sha256": self.sha256,
            "weights_from": self.source,
            "cases": [list(c) for c in self.shard_cases(index)],
            "suite_cases": [list(c) for c in self.cases],
            "expected_s": round(self.loads()[index - 1], 3) if self.source != "count" else None,
        }


def plan(
    cases: Sequence[Case],
    count: int,
    times: Mapping[Case, float] | None = None,
    source: str = "count",
) -> Plan:
    """Longest-processing-time-first assignment of ``cases`` to ``count`` shards."""
    if len(set(cases)) != len(cases):
        dupes = sorted({c for c in cases if list(cases).count(c) > 1})
        raise UsageError(f"the suite lists case {'/'.join(dupes[0])} twice: cannot shard it")
    w = weights(cases, times)
    if not times or not any(c in times for c in cases):
        source = "count"
    order = sorted(range(len(cases)), key=lambda i: (-w[cases[i]], i))
    loads = [0.0] * count
    sizes = [0] * count
    assignment = [0] * len(cases)
    for i in order:
        # Least load, then fewest cases (equal weights spread evenly), then lowest index.
        s = min(range(count), key=lambda j: (loads[j], sizes[j], j))
        assignment[i] = s + 1
        loads[s] += w[cases[i]]
        sizes[s] += 1
    return Plan(count, tuple(cases), tuple(assignment), tuple(w[c] for c in cases), source)


def resolve_invocation_id(flag: str | None, env: Mapping[str, str], machine: str) -> str | None:
    """The shared id of one logical invocation: the flag, else ``GUARD_INVOCATION_ID``, else
    (on GitHub Actions) the workflow run, attempt and architecture; None when unknown."""
    for value in (flag, env.get("GUARD_INVOCATION_ID")):
        if value and value.strip():
            return value.strip()
    if env.get("GITHUB_RUN_ID"):
        return f"github-{env['GITHUB_RUN_ID']}-{env.get('GITHUB_RUN_ATTEMPT', '1')}-{machine}"
    return None


def shard_work(
    suite: Suite,
    work: list[tuple[ModelEntry, tuple[str, ...]]],
    spec_text: str,
    *,
    times_path: str | Path | None = None,
    uri: str | None = None,
    invocation_id: str | None = None,
    git: Git | None = None,
) -> tuple[list[tuple[ModelEntry, tuple[str, ...]]], ShardBlock, str | None]:
    """This shard's part of ``work`` (``(entry, backends)`` in suite order), the ``shard``
    block of its results document, and a tracking problem (None when all went well).

    With tracking (``uri``), the shared invocation run is opened first
    (guard.track.invocation), and times come from result runs that started before it and
    belong to no shard of it: shards that start minutes apart, while other runs finish,
    still plan from the same history. ``times_path`` (a results file, e.g. the last merged
    run) replaces the history; without either, shards balance by count.
    """
    spec = parse_shard(spec_text)
    inv = resolve_invocation_id(invocation_id, os.environ, platform.machine())
    if inv is None and uri is not None and spec.count > 1:
        raise UsageError(
            f"--shard {spec}: the shards of one run need a shared invocation id",
            hint="Pass the same --invocation-id ID (or GUARD_INVOCATION_ID) to every shard, "
            "or --no-track.",
        )
    cases = [(entry.name, b, entry.target) for entry, backends in work for b in backends]
    problem: str | None = None
    opened: tuple[str, int] | None = None
    if uri is not None and inv is not None:
        try:
            opened = ensure_invocation(uri, suite.name, inv, spec.count, git)
        except GuardError as exc:
            problem = str(exc)
    times: dict[Case, float] | None = None
    source = "count"
    if times_path is not None:
        times = times_from_results(read_results(Path(times_path)))
        source = f"results:{times_path}"
    elif uri is not None and problem is None:
        times = case_times(
            uri, suite.name, cases, before_ms=opened[1] if opened else None, exclude_invocation=inv
        )
        source = f"mlflow:{uri}"
    p = plan(cases, spec.count, times, source)
    mine = set(p.shard_cases(spec.index))
    picked = []
    for entry, backends in work:
        kept = tuple(b for b in backends if (entry.name, b, entry.target) in mine)
        if kept:
            picked.append((entry, kept))
    block = p.describe(spec.index)
    block["invocation_id"] = inv
    return picked, block, problem
