"""Whether a cached artefact may be reused, and what happens to one that may not.

A cached artefact is reused only when every file still has the sha256 recorded in its
``hashes.json`` when it was built *and* the backend's own record agrees (a backend that
keeps one, such as bundled's ``artefact.json``, has a ``verify(dir)`` that says what
differs). Rewriting ``hashes.json`` to match an edited ``kernels.o`` therefore does not
make it pass: the backend's record still differs.

An artefact that fails either check is poisoned. It is never loaded and never blocks:
it is moved, in one rename, to ``.guard/quarantine/<model>-<backend>-<key>.<time>`` (kept
for whoever wants to look at it), a warning names the file that differed and where the
artefact went, and the artefact is rebuilt. An artefact that is merely incomplete (no
manifest or build record: a build cut short) is not poisoned; the build replaces it.
"""

from __future__ import annotations

import json
import os
import sys
import time
from pathlib import Path
from typing import Any

from guard.core.fsutil import atomic_write_text, file_sha256, read_bounded_text

HASHES = "hashes.json"
HASHES_SCHEMA_VERSION = 1
QUARANTINE = "quarantine"


def hash_tree(root: Path) -> dict[str, str] | None:
    """sha256 of every file under ``root`` but hashes.json; None if anything is not a file."""
    out: dict[str, str] = {}
    for dirpath, dirnames, filenames in os.walk(root):
        for d in dirnames:
            if (Path(dirpath) / d).is_symlink():
                return None
        for f in filenames:
            p = Path(dirpath) / f
            rel = p.relative_to(root).as_posix()
            if rel == HASHES:
                continue
            if p.is_symlink() or not p.is_file():
                return None
            out[rel] = file_sha256(p)
    return out


def write_hashes(root: Path) -> bool:
    """Record every file's sha256 in ``hashes.json``; False if a link or special file is there."""
    files = hash_tree(root)
    if files is None:
        return False
    doc = {"schema_version": HASHES_SCHEMA_VERSION, "files": files}
    atomic_write_text(root / HASHES, json.dumps(doc, indent=2, sort_keys=True) + "\n")
    return True


def _hashes_differ(final: Path) -> str | None:
    """How ``final`` differs from its ``hashes.json`` (one line), or None when it matches."""
    try:
        doc = json.loads(read_bounded_text(final / HASHES))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        return f"{HASHES} is unreadable ({getattr(exc, 'reason', None) or type(exc).__name__})"
    if not isinstance(doc, dict) or doc.get("schema_version") != HASHES_SCHEMA_VERSION:
        return f"{HASHES} is not of schema_version {HASHES_SCHEMA_VERSION}"
    recorded = doc.get("files")
    if not isinstance(recorded, dict):
        return f"{HASHES} records no files"
    try:
        now = hash_tree(final)
    except OSError as exc:
        return f"a file cannot be read ({exc.strerror or exc})"
    if now is None:
        return "it holds a link or a special file"
    for name in sorted(set(recorded) | set(now)):
        want, got = recorded.get(name), now.get(name)
        if want == got:
            continue
        if got is None:
            return f"{name} is missing (recorded in {HASHES})"
        if want is None:
            return f"{name} is not recorded in {HASHES} (added after the build)"
        return f"{name} differs from {HASHES} (recorded {str(want)[:12]}…, now {got[:12]}…)"
    return None


def poisoned(final: Path, backend: Any) -> str | None:
    """What makes the cached artefact ``final`` unusable (one line), or None when it is
    whole and unaltered by both ``hashes.json`` and the backend's own record."""
    why = _hashes_differ(final)
    if why is not None:
        return why
    verify = getattr(backend, "verify", None)
    if callable(verify):
        try:
            own = verify(final)
        except OSError as exc:
            return f"the backend's record cannot be read ({exc.strerror or exc})"
        if own:
            return f"{own} (the backend's own record)"
    return None


def quarantine(final: Path, guard_dir: Path, why: str) -> Path | None:
    """Move ``final`` into ``guard_dir/quarantine`` and warn; None if it was gone already.

    The name keeps the artefact's path under ``artefacts/`` (model, backend, key) and the
    time, so two quarantines of one key never collide.
    """
    try:
        rel = final.relative_to(guard_dir / "artefacts")
        name = "-".join(rel.parts)
    except ValueError:
        name = final.name
    dest_dir = guard_dir / QUARANTINE
    dest_dir.mkdir(parents=True, exist_ok=True)
    dest = dest_dir / f"{name}.{time.strftime('%Y%m%dT%H%M%S')}.{os.getpid()}"
    try:
        os.rename(final, dest)
    except FileNotFoundError:
        return None  # another guard moved it first
    print(
        f"guard: warning: cached artefact {final} is poisoned: {why}; moved to {dest} and rebuilt",
        file=sys.stderr,
    )
    return dest
