"""guard's per-user cache directory, and notes a user needs to read once, not every time.

Everything guard keeps between runs for a user lives under one root: ``$GUARD_CACHE`` when
set, else ``~/.cache/guard``. Its parts: ``zoo/`` (models built by code), ``envs/``
(``guard bump``'s virtual environments, unless ``GUARD_ENV_CACHE`` moves them) and
``notes.json`` (the notes already shown). ``guard cache`` shows and prunes them.
"""

from __future__ import annotations

import hashlib
import json
import os
import sys
from pathlib import Path

from guard.core.fsutil import atomic_write_text

NOTES = "notes.json"
MAX_NOTES = 2000  # a bounded file: the oldest notes are forgotten (and shown again) first


def cache_root() -> Path:
    """``$GUARD_CACHE``, else ``~/.cache/guard``."""
    root = os.environ.get("GUARD_CACHE")
    return Path(root) if root else Path.home() / ".cache" / "guard"


_shown: set[str] = set()  # this process's, also when the cache cannot be written


def note_once(key: str, message: str) -> bool:
    """Print ``guard: note: MESSAGE`` to stderr unless this note (``key`` names what it is
    about, e.g. a model's sha256) was shown before, by this or an earlier guard command.
    Returns whether it was printed. A cache that cannot be read or written shows it
    once per process instead."""
    ident = hashlib.sha256(f"{key}\n{message}".encode()).hexdigest()[:32]
    if ident in _shown:
        return False
    _shown.add(ident)
    path = cache_root() / NOTES
    try:
        seen = json.loads(path.read_text()) if path.is_file() else []
        seen = [s for s in seen if isinstance(s, str)] if isinstance(seen, list) else []
    except (OSError, ValueError):
        seen = []
    if ident in seen:
        return False
    print(f"guard: note: {message} (shown once)", file=sys.stderr)
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        atomic_write_text(path, json.dumps([*seen, ident][-MAX_NOTES:]) + "\n")
    except OSError:
        pass  # shown once per process, then
    return True
