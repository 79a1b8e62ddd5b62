"""The last finished invocation of a suite on a branch: the base of a pull request.

``guard run`` with tracking compares itself with it by default (guard.run.base_compare).
An invocation is a parent run (``guard.level=invocation``) carrying the whole results
document; guard.track.find_runs returns only FINISHED runs, so a run cut short (KILLED,
FAILED, still RUNNING after a kill -9) is never the base. A finished invocation without a
readable ``results.json`` (a sharded run whose merge was never recorded) is skipped for the
next older one.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from guard.compare.baseline import COMMIT_COLUMN, load_run
from guard.core.errors import GuardError
from guard.results.documents import ResultsDocument
from guard.results.record import Json
from guard.track import find_runs

# How many finished invocations to try, newest first, before saying there is none.
MAX_CANDIDATES = 5


@dataclass(frozen=True)
class BaseRun:
    run_id: str
    branch: str
    commit: str | None
    doc: ResultsDocument

    @property
    def label(self) -> str:
        at = f"@{self.commit[:10]}" if self.commit else ""
        return f"{self.branch}{at} (run:{self.run_id})"


def last_finished_invocation(
    uri: str,
    suite: str,
    branch: str,
    *,
    exclude_commit: str | None = None,
    finder: Callable[..., Any] | None = None,
    loader: Callable[[str, str], ResultsDocument | Mapping[str, Json]] | None = None,
) -> tuple[BaseRun | None, list[str]]:
    """The newest finished invocation of ``suite`` on ``branch`` (not of
    ``exclude_commit``, the head's own commit), and why newer candidates were skipped."""
    finder = finder or find_runs
    load = loader or load_run
    frame = finder(uri, suite, level="invocation", branch=branch, max_results=MAX_CANDIDATES * 4)
    skipped: list[str] = []
    if frame is None or len(frame) == 0:
        return None, skipped
    tried = 0
    for _, row in frame.iterrows():
        commit = row.get(COMMIT_COLUMN)
        commit = str(commit) if isinstance(commit, str) and commit else None
        if exclude_commit and commit == exclude_commit:
            continue
        if tried >= MAX_CANDIDATES:
            break
        tried += 1
        run_id = str(row["run_id"])
        try:
            doc = ResultsDocument.of(load(uri, run_id))
        except GuardError as exc:
            skipped.append(f"run:{run_id}: {exc}")
            continue
        return BaseRun(run_id, branch, commit, doc), skipped
    return None, skipped
