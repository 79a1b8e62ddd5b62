"""A large suite streams: built, measured and written a batch of models at a time.

A 10,000-model suite built every model before it measured or reported anything (about 4
hours). ``guard run`` now takes the suite's models in batches of at most ``batch_size()``
results (``GUARD_BATCH``, default 16): a batch is built, its rounds are measured
interleaved (round 1 of each of its results, then round 2, ...), its results are judged,
and the results so far are written at once to an in-progress results file, replaced
atomically after every batch: the ``--json`` path (else ``.guard/in-progress/<suite>.json``
in the working directory), with ``"in_progress": {"done", "total"}``. The finished run
writes its reports as before (the ``--json`` file then holds the whole run and no
``in_progress``; the default in-progress file is removed).

A suite of up to one batch runs exactly as before: every round of every result spans
the run.
"""

from __future__ import annotations

import json
import os
from collections.abc import Sequence
from pathlib import Path
from typing import TypeVar

from guard.checks.assemble import ResultJson
from guard.core.errors import UsageError
from guard.core.fsutil import atomic_write_text
from guard.run.document import InProgressJson, RunHead

ENV_BATCH = "GUARD_BATCH"
DEFAULT_BATCH = 16  # results: a few minutes of building, then their rounds

W = TypeVar("W")


def batch_size() -> int:
    """``GUARD_BATCH`` (results per batch), else DEFAULT_BATCH."""
    raw = os.environ.get(ENV_BATCH)
    if raw is None or raw == "":
        return DEFAULT_BATCH
    try:
        n = int(raw)
    except ValueError:
        n = 0
    if n < 1:
        raise UsageError(
            f"{ENV_BATCH} must be a positive integer, got {raw!r}",
            where=ENV_BATCH,
            hint=f"unset it ({DEFAULT_BATCH} results per batch) or set e.g. 64.",
        )
    return n


def batches(
    work: Sequence[tuple[W, tuple[str, ...]]], size: int
) -> list[list[tuple[W, tuple[str, ...]]]]:
    """``work`` ((model entry, its backends) in suite order) cut into batches of at most
    ``size`` results; a model's backends stay in one batch (it is prepared once)."""
    out: list[list[tuple[W, tuple[str, ...]]]] = []
    count = 0
    for item in work:
        n = len(item[1])
        if not out or (count + n > size and count > 0):
            out.append([])
            count = 0
        out[-1].append(item)
        count += n
    return out


class InProgress:
    """The results so far, written after every batch: one file, replaced atomically."""

    def __init__(self, path: Path, head: RunHead, total: int, default: bool) -> None:
        self.path = path
        self.head = head  # the results document's fields other than results
        self.total = total
        self.default = default  # the .guard/in-progress file: removed when the run ends

    @classmethod
    def for_run(
        cls, json_path: Path | None, workdir: Path, head: RunHead, total: int
    ) -> InProgress:
        if json_path is not None:
            return cls(json_path, head, total, default=False)
        path = workdir / ".guard" / "in-progress" / f"{head.get('suite')}.json"
        return cls(path, head, total, default=True)

    def write(self, results: list[ResultJson]) -> None:
        """The document so far; a file that cannot be written is the end report's to say."""
        doc: InProgressJson = {**self.head, "results": results,
               "in_progress": {"done": len(results), "total": self.total}}  # fmt: skip
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            atomic_write_text(self.path, json.dumps(doc, indent=1, default=str) + "\n")
        except OSError:
            pass

    def close(self) -> None:
        if self.default:
            self.path.unlink(missing_ok=True)
