"""``guard bisect SUITE --good REF --bad REF``: the first commit whose change regressed.

asv's ``asv find`` for guard: a binary search over the commits between a good and a bad
commit where every step is a paired, interleaved ``guard ab`` (guard.experiment.ab_ref: each
commit's tree in its own checkout, cached by sha, timed in alternation with the good
commit on this runner). A commit is *regressed* when some (model, backend, target) of the
suite is significantly and largely slower than at the good commit.

The steps, for ``n`` commits after GOOD up to BAD (``git rev-list --ancestry-path``, oldest
first):

1. BAD against GOOD. Not regressed: the range holds no regression, said after one step.
2. Otherwise the first regressed commit lies in (GOOD, BAD]: the commit halfway is timed
   against GOOD; regressed moves the upper end down to it, anything else (pass, improved,
   inconclusive) moves the lower end up. After ceil(log2 n) steps one commit is left.

So 16 commits take at most 1 + 4 = 5 steps. An inconclusive step counts as not regressed
(a bisection must decide) and is reported as such, with its interval. A commit in the
middle that does not build is skipped for its neighbour, as ``git bisect skip`` does; an
end that does not build is exit 2 naming the commit.
"""

from __future__ import annotations

import math
import subprocess
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import NotRequired, TypedDict

from guard.core.errors import GuardError, UsageError
from guard.experiment.ab_ref import _git, resolve_ref
from guard.results.documents import ComparisonDocument, ComparisonRow

# step(good_sha, sha) -> the guard ab comparison document of sha against good_sha.
Step = Callable[[str, str], ComparisonDocument]


class StepRowJson(TypedDict):
    """What a step keeps of a comparison row."""

    model: str | None
    backend: str | None
    target: str | None
    verdict: str | None
    ratio: float | None
    ci: list[float | None] | None


class StepJson(TypedDict):
    sha: str
    index: int
    verdict: str
    rows: list[StepRowJson]
    error: NotRequired[str]


class BisectJson(TypedDict):
    """``guard bisect --json``: the bisection and each step's verdict."""

    schema_version: int
    good: str
    bad: str
    commits: list[str]
    first_regressed: str | None
    ambiguous: list[str]
    steps: list[StepJson]


@dataclass
class StepVerdict:
    sha: str
    index: int  # 1..n: position after GOOD
    verdict: str  # regressed | pass | improved | inconclusive | skipped
    rows: list[ComparisonRow] = field(default_factory=list)
    error: str | None = None

    @property
    def regressed(self) -> bool:
        return self.verdict == "regressed"

    def line(self, n: int) -> str:
        head = f"{self.sha[:12]} ({self.index}/{n}): {self.verdict}"
        if self.verdict == "inconclusive":
            head += " (counted as not regressed)"
        if self.error:
            return f"{head} ({self.error})"
        parts = []
        for r in self.rows:
            lo, hi = r.ci
            parts.append(
                f"{r.model}[{r.backend}] {r.verdict} x{r.ratio:.3f} (interval {lo:.3f}-{hi:.3f})"
            )
        return f"{head}: {'; '.join(parts)}" if parts else head


@dataclass
class BisectResult:
    good: str
    bad: str
    commits: list[str]  # after GOOD, oldest first, BAD last
    steps: list[StepVerdict] = field(default_factory=list)
    first_regressed: str | None = None
    ambiguous: list[str] = field(default_factory=list)  # unbuildable commits it may be among

    def to_dict(self) -> BisectJson:
        steps: list[StepJson] = []
        for s in self.steps:
            step: StepJson = {
                "sha": s.sha, "index": s.index, "verdict": s.verdict,
                "rows": [_row_json(r) for r in s.rows],
            }  # fmt: skip
            if s.error:
                step["error"] = s.error
            steps.append(step)
        return {
            "schema_version": 1,
            "good": self.good,
            "bad": self.bad,
            "commits": self.commits,
            "first_regressed": self.first_regressed,
            "ambiguous": self.ambiguous,
            "steps": steps,
        }


def max_steps(n: int) -> int:
    """Steps a clean bisection of ``n`` commits takes at most: BAD once, then halving."""
    return 1 + (math.ceil(math.log2(n)) if n > 1 else 0)


def _commit(repo: Path, flag: str, ref: str) -> str:
    try:
        return resolve_ref(repo, ref)
    except UsageError:
        raise UsageError(
            f"{flag} {ref}: no such commit",
            where=str(repo),
            hint="Fetch it first (CI: actions/checkout with fetch-depth: 0).",
        ) from None


def commits_between(repo: Path, good: str, bad: str) -> tuple[str, str, list[str]]:
    """(good sha, bad sha, the commits after GOOD up to BAD, oldest first)."""
    g, b = _commit(repo, "--good", good), _commit(repo, "--bad", bad)
    if g == b:
        raise UsageError(f"--good {good} and --bad {bad} are the same commit {g[:12]}")
    if subprocess.run(["git", "merge-base", "--is-ancestor", g, b], cwd=repo).returncode != 0:
        raise UsageError(
            f"--good {good} ({g[:12]}) is not an ancestor of --bad {bad} ({b[:12]})",
            hint="Bisect from an older good commit to a newer bad one.",
        )
    listed = _git(repo, "rev-list", "--ancestry-path", "--first-parent", "--reverse", f"{g}..{b}")
    commits = listed.split() if listed else []
    if not commits or commits[-1] != b:
        raise UsageError(f"no first-parent path from {g[:12]} to {b[:12]}")
    return g, b, commits


def _row_json(r: ComparisonRow) -> StepRowJson:
    """What a step keeps of a comparison row: model, backend, target, verdict, ratio, ci."""
    return {"model": r.model, "backend": r.backend, "target": r.target, "verdict": r.verdict,
            "ratio": r.ratio, "ci": list(r.ci) if r.ci else None}  # fmt: skip


def _verdict(doc: ComparisonDocument, sha: str, index: int) -> StepVerdict:
    rows = list(doc.rows)
    verdicts = {r.verdict for r in rows}
    v = next(
        (x for x in ("regressed", "inconclusive", "improved", "pass") if x in verdicts), "pass"
    )
    return StepVerdict(sha, index, v, rows)


def bisect(
    good: str, bad: str, commits: list[str], step: Step, say: Callable[[str], None] = print
) -> BisectResult:
    """Binary search for the first regressed commit of ``commits`` (after ``good``)."""
    n = len(commits)
    res = BisectResult(good, bad, commits)

    def judge(i: int, *, end: bool = False) -> StepVerdict:
        sha = commits[i]
        try:
            sv = _verdict(step(good, sha), sha, i + 1)
        except GuardError as exc:
            if end:  # the ab worker says which side failed: base is GOOD, head is BAD
                which = f"--good {good[:12]}" if "base side" in str(exc) else f"--bad {sha[:12]}"
                raise UsageError(
                    f"{which} does not build or run: {exc}",
                    hint="Bisect between commits whose suite builds.",
                ) from None
            sv = StepVerdict(sha, i + 1, "skipped", error=f"does not build: {exc}")
        res.steps.append(sv)
        say(f"step {len(res.steps)}: {sv.line(n)}")
        return sv

    if not judge(n - 1, end=True).regressed:
        say(f"no regression between {good[:12]} and {bad[:12]} ({n} commits)")
        return res
    lo, hi = -1, n - 1  # lo: last known not regressed (-1 is GOOD); hi: first known regressed
    skipped: set[int] = set()
    while hi - lo > 1:
        open_ = [i for i in range(lo + 1, hi) if i not in skipped]
        if not open_:
            res.ambiguous = [commits[i] for i in range(lo + 1, hi)]
            break
        mid = (lo + hi) // 2
        mid = min(open_, key=lambda i: (abs(i - mid), i))
        sv = judge(mid)
        if sv.verdict == "skipped":
            skipped.add(mid)
        elif sv.regressed:
            hi = mid
        else:
            lo = mid
    res.first_regressed = commits[hi]
    return res
