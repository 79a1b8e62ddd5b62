"""Results kept for a later ``guard track push``, and pushes that do not log twice.

``keep`` writes ``.guard/pending/<suite>-<started>.json``, or ``-2``, ``-3``... when that
name is taken: the name is claimed by a hard link of a complete temporary file, which fails
when the name exists, so concurrent runs that started in the same second each keep their
own file (checking that a name is free and then writing it would let one result set
overwrite another).

``journal`` writes the finished results there *before* the first MLflow call of a run, as
``<suite>-<started>-<digest>.json`` (atomically; the digest is the results' identity, so
writing it again changes nothing); a run removes it once logged. A kill at any point of
the logging leaves it, and ``guard track push --pending`` (``journalled``) delivers every
file there that is not logged yet, idempotently.

``push_lock`` serialises pushes of one results file on this machine (an exclusive
``flock`` on the file itself): the second of two simultaneous pushes finds the first one's
runs and logs nothing.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import stat
import time
from collections.abc import Iterator, Mapping
from pathlib import Path

from guard.core import fault
from guard.core.errors import TrackingError
from guard.core.fsutil import atomic_write_text, describe_os_error, exclusive_write_text
from guard.core.json_types import Json
from guard.results.documents import ResultsDocument

PENDING_DIR = "pending"
_MAX_NAMES = 10_000


def keep(doc: Mapping[str, Json], pending: Path) -> Path:
    """Write ``doc`` to a new, unique file in ``pending``; return its path."""
    typed = ResultsDocument.of(doc)
    stamp = str(typed.started or time.strftime("%Y%m%dT%H%M%S"))
    safe = _safe_name(f"{typed.suite}-{stamp}")
    text = json.dumps(doc, indent=2, sort_keys=True, default=str) + "\n"
    try:
        pending.mkdir(parents=True, exist_ok=True)
        for n in range(1, _MAX_NAMES + 1):
            path = pending / (f"{safe}.json" if n == 1 else f"{safe}-{n}.json")
            try:
                return exclusive_write_text(path, text)
            except FileExistsError:
                continue
    except OSError as exc:
        raise TrackingError(
            f"cannot keep results locally in {pending}: {describe_os_error(exc)}",
            hint="free space or permissions there, or write them with --json PATH.",
        ) from None
    raise TrackingError(
        f"cannot keep results locally in {pending}: {_MAX_NAMES} files named {safe}* exist",
        hint="push or remove old pending results.",
    )


def _safe_name(text: str) -> str:
    return "".join(c if c.isalnum() or c in "-_." else "-" for c in text)[:150]


def journal(doc: Mapping[str, Json], pending: Path, digest: str) -> Path:
    """Write ``doc`` to its journal file in ``pending`` (atomically); return its path."""
    typed = ResultsDocument.of(doc)
    name = _safe_name(f"{typed.suite}-{typed.started or ''}")
    path = pending / f"{name}-{digest[:16]}.json"
    text = json.dumps(doc, indent=2, sort_keys=True, default=str) + "\n"
    try:
        pending.mkdir(parents=True, exist_ok=True)
        atomic_write_text(path, text)
    except OSError as exc:
        raise TrackingError(
            f"cannot journal the results in {exc.filename or pending}: {describe_os_error(exc)}",
            hint="free space or permissions there, or write them with --json PATH.",
        ) from None
    fault.point("journal")  # on disk, nothing logged yet
    return path


def journalled(pending: Path) -> list[Path]:
    """The results files kept in ``pending``, oldest first (temporary files excluded)."""
    if not pending.is_dir():
        return []
    found = [p for p in pending.glob("*.json") if p.is_file() and not p.name.startswith(".")]
    return sorted(found, key=lambda p: (p.stat().st_mtime, p.name))


@contextlib.contextmanager
def push_lock(results_path: Path) -> Iterator[None]:
    """Hold an exclusive lock on ``results_path`` while it is looked up and logged."""
    try:
        # O_NONBLOCK: a FIFO must not block here; only a regular file is locked.
        fd = os.open(results_path, os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0))
    except OSError:
        yield  # unreadable: load_results says why, with the path
        return
    if not stat.S_ISREG(os.fstat(fd).st_mode):
        os.close(fd)
        yield  # load_results refuses it, with the path
        return
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)
