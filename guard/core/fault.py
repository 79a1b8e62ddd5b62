"""Fault injection for the kill tests: ``GUARD_FAULT=<point>`` SIGKILLs guard at that point.

Each stage of a run where a kill must lose nothing calls :func:`point` with its name
(``build``, ``measure``, ``journal``, ``mlflow.create_parent``, ``mlflow.log_child``,
``store.transaction``, ...; tests/faults/test_kill_points.py lists them all). When the
environment names that point, the process kills itself with SIGKILL: no handler, no
``finally``, exactly what a runner's OOM killer or a pulled plug does. ``NAME@N`` kills at
the N-th time the point is reached (``mlflow.log_child@2``: after the first child is
logged), ``NAME:KEY`` only where the point names that key (``atomic_write:r.json``).
Unset (always, outside the tests), a point costs one dictionary lookup.
"""

from __future__ import annotations

import os
import signal

ENV = "GUARD_FAULT"
_hits: dict[str, int] = {}


def _wanted() -> tuple[str, int] | None:
    spec = os.environ.get(ENV)
    if not spec:
        return None
    name, _, nth = spec.partition("@")
    return name, int(nth) if nth.isdigit() else 1


def armed(name: str) -> bool:
    """Whether GUARD_FAULT names this point (for hooks that must be installed first)."""
    wanted = _wanted()
    return wanted is not None and wanted[0].partition(":")[0] == name


def point(name: str, key: str | None = None) -> None:
    """SIGKILL this process here when GUARD_FAULT names ``name`` (or ``name:key``)."""
    wanted = _wanted()
    if wanted is None or wanted[0] not in (name, f"{name}:{key}"):
        return
    _hits[wanted[0]] = _hits.get(wanted[0], 0) + 1
    if _hits[wanted[0]] >= wanted[1]:
        if os.getpgid(0) == os.getpid():  # a session of its own (the tests): its workers too
            os.killpg(os.getpid(), signal.SIGKILL)
        os.kill(os.getpid(), signal.SIGKILL)


def install_store_hook() -> None:
    """Arm ``store.transaction``: a kill inside the first large write to a sqlite store.

    Installed on SQLAlchemy's Engine class (every MLflow sqlite engine) when the point is
    armed: each connection gets a page cache of a few pages, as a store much larger than
    memory would, so the transaction's changed pages reach the database file before the
    commit; the kill comes right after an insert of many metric rows, mid-transaction.
    """
    if not armed("store.transaction"):
        return
    from sqlalchemy import event
    from sqlalchemy.engine import Engine

    if getattr(install_store_hook, "done", False):
        return
    install_store_hook.done = True  # type: ignore[attr-defined]

    @event.listens_for(Engine, "connect")
    def _small_cache(dbapi_con, _record):  # type: ignore[no-untyped-def]
        if "sqlite" in type(dbapi_con).__module__:
            dbapi_con.execute("pragma cache_size = 4")

    @event.listens_for(Engine, "after_cursor_execute")
    def _mid_transaction(conn, _cursor, statement, params, _context, executemany):  # type: ignore[no-untyped-def]
        # One row's parameters, a list of rows (executemany), or many rows in one flat
        # tuple (SQLAlchemy's insertmanyvalues): large either way.
        rows = len(params) if isinstance(params, list | tuple) else 1
        if statement.lstrip().upper().startswith("INSERT INTO METRICS") and rows >= 20:
            point("store.transaction")
