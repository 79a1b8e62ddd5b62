"""guard's per-user cache directory, and notes a user needs to read once, not every time.

Everything guard keeps between runs for a user lives under one root: ``$GUARD_CACHE`` when
set, else ``~/.cache/guard``. Its parts: ``zoo/`` (models built by code), ``envs/``
(``guard bump``'s virtual environments, unless ``GUARD_ENV_CACHE`` moves them), ``int8/``
(quantisation profiles and models), ``codegen/`` (objects ``guard fit`` compiled:
guard.compiler.codegen.object_cache) and ``notes.json`` (the notes already shown). ``guard cache`` shows and prunes them.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import sys
import time
from dataclasses import dataclass
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


def tree_bytes(root: Path) -> int:
    """Bytes of the files under ``root`` (or of ``root`` itself), links not followed."""
    if not root.is_dir():
        try:
            return os.lstat(root).st_size
        except OSError:
            return 0
    total = 0
    for dirpath, _, files in os.walk(root):
        for name in files:
            try:
                total += os.lstat(os.path.join(dirpath, name)).st_size
            except OSError:
                continue
    return total


@dataclass(frozen=True)
class CacheEntry:
    """One prunable thing in the cache: a zoo model, a bump environment, ..."""

    part: str  # zoo, envs, or another folder of the root
    path: Path
    bytes: int
    mtime: float  # when it was last written


def cache_entries(root: Path | None = None) -> list[CacheEntry]:
    """Every entry of every part of the cache (the children of its folders), oldest first.
    ``notes.json`` is not an entry: it is a few kilobytes, and pruning it repeats notes."""
    root = root if root is not None else cache_root()
    out = []
    parts = [p for p in sorted(root.iterdir()) if p.is_dir()] if root.is_dir() else []
    for part in parts:
        for child in sorted(part.iterdir()):
            try:
                mtime = child.lstat().st_mtime
            except OSError:
                continue
            out.append(CacheEntry(part.name, child, tree_bytes(child), mtime))
    return sorted(out, key=lambda e: (e.mtime, str(e.path)))


def prune(
    entries: list[CacheEntry],
    *,
    older_than_s: float | None = None,
    max_bytes: int | None = None,
    now: float | None = None,
) -> list[CacheEntry]:
    """The entries to remove: those older than ``older_than_s``, then the oldest of the
    rest until what stays fits in ``max_bytes``."""
    now = time.time() if now is None else now
    chosen = [e for e in entries if older_than_s is not None and now - e.mtime > older_than_s]
    if max_bytes is not None:
        kept = [e for e in entries if e not in chosen]
        size = sum(e.bytes for e in kept)
        for e in kept:  # oldest first
            if size <= max_bytes:
                break
            chosen.append(e)
            size -= e.bytes
    return chosen


def remove(entries: list[CacheEntry]) -> int:
    """Remove the entries; the bytes freed."""
    freed = 0
    for e in entries:
        if e.path.is_dir() and not e.path.is_symlink():
            shutil.rmtree(e.path, ignore_errors=True)
        else:
            e.path.unlink(missing_ok=True)
        if not e.path.exists():
            freed += e.bytes
    return freed
