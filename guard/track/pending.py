"""Results kept for a later ``guard track push``, and pushes that do not log twice.

``keep`` writes ``.guard/pending/<suite>-<started>.json``, or ``-2``, ``-3``... when that
name is taken: the name is claimed by a hard link of a complete temporary file, which fails
when the name exists, so concurrent runs that started in the same second each keep their
own file (checking that a name is free and then writing it would let one result set
overwrite another).

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
from typing import Any

from guard.core.errors import TrackingError
from guard.core.fsutil import describe_os_error, exclusive_write_text

PENDING_DIR = "pending"
_MAX_NAMES = 10_000


def keep(doc: Mapping[str, Any], pending: Path) -> Path:
    """Write ``doc`` to a new, unique file in ``pending``; return its path."""
    stamp = str(doc.get("started") or time.strftime("%Y%m%dT%H%M%S"))
    safe = "".join(c if c.isalnum() or c in "-_." else "-" for c in f"{doc.get('suite')}-{stamp}")[
        :150
    ]
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
