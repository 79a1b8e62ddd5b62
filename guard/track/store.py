"""The embedded tracking store (``sqlite:///.../.guard/mlflow.db``): created whole, or not at all.

MLflow creates a sqlite store by running some fifty schema migrations in place. A kill, a
full disk or a second guard starting at the same moment would leave it mid-migration, and
every later run would fail with "unreachable". Here:

- a store is created by migrating a temporary file beside it, which is renamed into place
  only when complete, under an exclusive lock (``.mlflow.db.lock``): concurrent first runs
  wait for one creation instead of racing two;
- the store is always opened read-write, even to read its schema: a kill in the middle of
  a large write leaves a hot ``-journal``, which only a read-write connection rolls back (a
  read-only one reads the half-written pages, and sees a corrupt store);
- a store whose schema is not at MLflow's head is moved aside (``mlflow.db.broken-<time>``,
  together with its ``-journal``/``-wal``/``-shm``) and recreated only when
  ``PRAGMA integrity_check`` says ok and it holds no runs; one holding runs is refused with
  the command that finishes the migration, and one that fails the check (or is no
  database) is refused with ``sqlite3 FILE .recover``: unreadable is never taken for empty;
- a directory or database that cannot be written is said at once, before measuring,
  instead of after MLflow's retries.

The schema check reads the sqlite file directly (no mlflow import): it runs on every
``guard run`` that tracks locally. The integrity check runs only on a store that is not at
the head schema (it reads the whole file).

The store stays in sqlite's default rollback-journal mode, not WAL: in WAL mode committed
runs live in ``mlflow.db-wal`` until a checkpoint, so copying or caching ``mlflow.db``
alone (CI caches, ``cp`` to a colleague) silently drops the newest runs (tried: 17 runs
committed one by one in WAL mode, a copy of the ``.db`` file alone held not even the
table; in rollback mode it held all 17), and WAL needs
shared memory that network file systems do not give. A rollback journal is as safe
against kills once every open is read-write (docs/ARCHITECTURE.md, "What happens after a
kill").
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


class StoreRefused(TrackingError):
    """The store fails sqlite's integrity check, or is not a database: never replaced."""


def _connect(db: Path) -> sqlite3.Connection:
    """A read-write connection: the first read rolls a hot journal back (a read-only one
    cannot, and reads the half-written pages of a transaction a kill cut short)."""
    return sqlite3.connect(str(db), timeout=30)


def _revision(db: Path) -> str | None:
    """The store's alembic revision, or None when it has none or cannot be read."""
    try:
        con = _connect(db)
    except sqlite3.Error:
        return None
    try:
        row = con.execute("select version_num from alembic_version").fetchone()
        return str(row[0]) if row else None
    except sqlite3.Error:
        return None
    finally:
        con.close()


def probe(db: Path) -> tuple[str | None, int | None, str | None]:
    """(alembic revision, number of runs, problem) of a sqlite store.

    ``problem`` is None when ``PRAGMA integrity_check`` says ok; else what it (or sqlite)
    said, and the number of runs is None: unreadable is never taken for empty. A store
    with no ``runs`` table yet (a creation cut short) holds 0 runs.
    """
    try:
        con = _connect(db)
    except sqlite3.Error as exc:
        return None, None, str(exc)
    try:
        try:
            rows = con.execute("pragma integrity_check").fetchall()
        except sqlite3.Error as exc:
            return None, None, str(exc)
        if [r[0] for r in rows] != ["ok"]:
            return None, None, "; ".join(str(r[0]) for r in rows[:3])
        tables = {r[0] for r in con.execute("select name from sqlite_master where type='table'")}
        rev = None
        if "alembic_version" in tables:
            row = con.execute("select version_num from alembic_version").fetchone()
            rev = str(row[0]) if row else None
        runs = con.execute("select count(*) from runs").fetchone()[0] if "runs" in tables else 0
        return rev, int(runs), None
    except sqlite3.Error as exc:
        return None, None, str(exc)
    finally:
        con.close()


def _at_head(db: Path) -> bool:
    head = head_revision()
    rev = _revision(db)
    return rev is not None and (head is None or rev == head)


def _sidecars(db: Path) -> list[Path]:
    """The store and the files sqlite keeps beside it: they only ever move together."""
    return [db.with_name(db.name + suffix) for suffix in ("", "-journal", "-wal", "-shm")]


def _journal_beside(db: Path) -> bool:
    """A journal beside the store: a writer is busy, or one was killed mid-transaction."""
    return any(f.exists() for f in _sidecars(db)[1:3])


def _move_aside(db: Path) -> Path:
    aside = db.with_name(f"{db.name}.broken-{time.strftime('%Y%m%dT%H%M%S')}")
    for src, dst in zip(_sidecars(db), _sidecars(aside), strict=True):
        if src.exists():
            os.replace(src, dst)
    return aside


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
    if db.exists() and not _journal_beside(db) and _at_head(db):
        return
    with _locked(db.parent / f".{db.name}.lock"):
        if not db.exists() or db.stat().st_size == 0:
            if any(f.exists() for f in _sidecars(db)[1:]):
                # A journal with no store (or an empty one) would be rolled back into the
                # new store on its first write: it goes aside first, with what it belongs to.
                aside = _move_aside(db)
                if say is not None:
                    say(f"note: moved the stray journal of {db} to {aside}-*")
            _create(uri, db, artifact_root)
            return
        # Read-write: a hot journal left by a kill is rolled back before anything is read.
        rev, runs, problem = probe(db)
        if problem is not None or runs is None:
            raise StoreRefused(
                f"local tracking store {db} fails sqlite's integrity check "
                f"({(problem or 'unreadable')[:200]}): guard neither uses nor replaces it",
                hint=f"recover its runs with `sqlite3 {db} .recover | sqlite3 {db}.recovered`, "
                f"then move {db} aside and rename {db}.recovered to it (or pass --tracking-uri).",
            )
        head = head_revision()
        if rev is not None and (head is None or rev == head):
            return  # sound (another guard may have created it while we waited for the lock)
        if runs == 0:
            # Nothing was ever logged to it: a creation that was cut short. Keep the
            # file (with its journal, if any) for inspection and start over.
            aside = _move_aside(db)
            if say is not None:
                say(
                    f"note: the local tracking store {db} was left half-created (schema "
                    f"{rev or 'none'}, no runs); moved it to {aside} and created a new one"
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
