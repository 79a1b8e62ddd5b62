"""The embedded tracking store (``sqlite:///.../.guard/mlflow.db``): created whole, or not at all.

MLflow creates a sqlite store by running some fifty schema migrations in place. A kill, a
full disk or a second guard starting at the same moment would leave it mid-migration, and
every later run would fail with "unreachable". Here:

- a store is created by migrating a temporary file beside it, which is renamed into place
  only when complete, under an exclusive lock (``.mlflow.db.lock``): concurrent first runs
  wait for one creation instead of racing two;
- a store whose schema is not at MLflow's head is recreated when it holds no runs (nothing
  to lose; the old file is kept as ``mlflow.db.broken-<time>``), and refused otherwise with
  the command that finishes the migration;
- a directory or database that cannot be written is said at once, before measuring,
  instead of after MLflow's retries.

The schema check reads the sqlite file directly (no mlflow import): it runs on every
``guard run`` that tracks locally.
"""

from __future__ import annotations

import contextlib
import fcntl
import importlib.util
import logging
import os
import re
import sqlite3
import time
from collections.abc import Callable, Iterator
from functools import lru_cache
from pathlib import Path

from guard.core.errors import TrackingError
from guard.core.fsutil import describe_os_error

_REV_RE = re.compile(r"^(down_)?revision\s*(?::\s*[^=]+)?=\s*(.+)$", re.MULTILINE)


@lru_cache(maxsize=1)
def head_revision() -> str | None:
    """MLflow's newest schema revision, read from its migration scripts (not imported)."""
    spec = importlib.util.find_spec("mlflow")
    if spec is None or not spec.submodule_search_locations:
        return None
    versions = (
        Path(next(iter(spec.submodule_search_locations))) / "store" / "db_migrations" / "versions"
    )
    revisions: set[str] = set()
    parents: set[str] = set()
    for f in versions.glob("*.py"):
        for down, value in _REV_RE.findall(f.read_text(errors="replace")):
            found = re.findall(r"['\"]([0-9a-zA-Z_]+)['\"]", value)
            (parents if down else revisions).update(found)
    heads = revisions - parents
    return next(iter(heads)) if len(heads) == 1 else None


def _schema(db: Path) -> tuple[str | None, int | None]:
    """(alembic revision, number of runs) of a sqlite store; (None, None) if unreadable."""
    try:
        con = sqlite3.connect(f"file:{db}?mode=ro", uri=True, timeout=30)
    except sqlite3.Error:
        return None, None
    try:
        try:
            rev = con.execute("select version_num from alembic_version").fetchone()
        except sqlite3.Error:
            rev = None
        try:
            runs = con.execute("select count(*) from runs").fetchone()[0]
        except sqlite3.Error:
            runs = None
        return (rev[0] if rev else None), runs
    except sqlite3.DatabaseError:
        return None, None
    finally:
        con.close()


def _at_head(db: Path) -> bool:
    head = head_revision()
    rev, _ = _schema(db)
    return rev is not None and (head is None or rev == head)


@contextlib.contextmanager
def _locked(lock_path: Path) -> Iterator[None]:
    fd = os.open(lock_path, os.O_RDWR | os.O_CREAT, 0o644)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)


def _writable(uri: str, db: Path) -> None:
    d = db.parent
    problem = None
    if not os.access(d, os.W_OK | os.X_OK):
        problem = f"directory {d} is not writable"
    elif db.exists() and not os.access(db, os.W_OK):
        problem = f"{db} is read-only"
    if problem is None:
        try:  # root passes access() checks on a read-only mount: try the real thing
            probe = d / f".{db.name}.{os.getpid()}.probe"
            probe.touch()
            probe.unlink()
        except OSError as exc:
            problem = f"cannot write in {d}: {describe_os_error(exc)}"
    if problem is not None:
        raise TrackingError(
            f"local tracking store {uri}: {problem}",
            hint="make it writable, or pass --tracking-uri (results are kept in --json PATH).",
        )


def _create(uri: str, db: Path, artifact_root: str | None) -> None:
    """Migrate a temporary sqlite file to MLflow's schema, then rename it into place."""
    for stale in db.parent.glob(f".{db.name}.*.creating*"):
        stale.unlink(missing_ok=True)  # we hold the lock: any half-made store is stale
    # A fresh name per attempt: MLflow keeps an engine per database URI, and one left from
    # a failed attempt would still point at the removed file.
    tmp = db.parent / f".{db.name}.{os.getpid()}-{os.urandom(4).hex()}.creating"
    quiet = [logging.getLogger(n) for n in ("mlflow.store.db.utils", "alembic")]
    levels = [lg.level for lg in quiet]
    try:
        from mlflow.store.tracking.sqlalchemy_store import SqlAlchemyStore

        for lg in quiet:  # "Creating initial MLflow database tables..." is not news
            lg.setLevel(logging.WARNING)
        store = SqlAlchemyStore(f"sqlite:///{tmp}", artifact_root or db.parent.as_uri())
        store.engine.dispose()
        os.replace(tmp, db)
    except BaseException as exc:
        for f in db.parent.glob(f"{tmp.name}*"):
            f.unlink(missing_ok=True)
        if isinstance(exc, OSError):
            raise TrackingError(
                f"cannot create the local tracking store {db}: {describe_os_error(exc)}",
                hint="free space or permissions there, or pass --tracking-uri.",
            ) from None
        if isinstance(exc, Exception):
            text = (str(exc).strip().splitlines() or [type(exc).__name__])[0][:300]
            raise TrackingError(
                f"cannot create the local tracking store {db}: {text}",
                hint="free space or permissions there, or pass --tracking-uri.",
            ) from None
        raise
    finally:
        for lg, level in zip(quiet, levels, strict=True):
            lg.setLevel(level)


def ensure_local_store(
    uri: str, db: Path, artifact_root: str | None = None, say: Callable[[str], None] | None = None
) -> None:
    """Make sure the sqlite store at ``db`` is usable: create it whole, or say what to do."""
    db = db.resolve()
    if not db.parent.is_dir():
        raise TrackingError(
            f"tracking store {uri}: directory {db.parent} does not exist",
            hint="create it, or pass another --tracking-uri.",
        )
    _writable(uri, db)
    if db.exists() and _at_head(db):
        return
    with _locked(db.parent / f".{db.name}.lock"):
        if not db.exists() or db.stat().st_size == 0:
            _create(uri, db, artifact_root)
            return
        if _at_head(db):  # another guard created it while we waited for the lock
            return
        rev, runs = _schema(db)
        if not runs:
            # Nothing was ever logged to it: a creation that was cut short. Keep the
            # file for inspection and start over.
            aside = db.with_name(f"{db.name}.broken-{time.strftime('%Y%m%dT%H%M%S')}")
            os.replace(db, aside)
            if say is not None:
                say(
                    f"note: the local tracking store {db} was left half-created (schema "
                    f"{rev or 'none'}); moved it to {aside} and created a new one"
                )
            _create(uri, db, artifact_root)
            return
        found = rev or "an unknown version"
        raise TrackingError(
            f"local tracking store {db} holds {runs} run(s) but its schema is at {found}, not "
            f"MLflow's {head_revision()} (an upgrade was interrupted, or another MLflow wrote it)",
            hint=f"finish the migration: mlflow db upgrade {uri} (after copying the file), "
            f"or move it aside: mv {db} {db}.broken",
        )
