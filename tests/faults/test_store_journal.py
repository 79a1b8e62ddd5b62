"""Issue 27 H0: a kill in the middle of a large write to the embedded store leaves a hot
journal; the next guard must roll it back (a read-write open), keep every run, and never
move a store that holds runs, a journal, or fails ``PRAGMA integrity_check``."""

from __future__ import annotations

import os
import signal
import sqlite3
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from guard.core.errors import TrackingError
from guard.track.store import StoreRefused, ensure_local_store, probe

RUNS = 17

# A writer that changes the runs table and grows the metrics table in one transaction,
# with a cache so small that sqlite writes changed pages into the store before the
# commit, then is SIGKILLed: the store file holds half a transaction, the journal the rest.
_KILLED_WRITER = """
import os, signal, sqlite3, sys
con = sqlite3.connect(sys.argv[1], isolation_level=None)
con.execute("pragma cache_size = 4")
con.execute("begin immediate")
run = con.execute("select run_uuid from runs limit 1").fetchone()[0]
con.execute("update runs set name = hex(randomblob(900))")
for i in range(20000):
    con.execute(
        "insert into metrics (key, value, timestamp, run_uuid, step, is_nan) "
        "values (?, ?, ?, ?, ?, 0)", (f"k{i % 50}", float(i), i, run, i))
os.kill(os.getpid(), signal.SIGKILL)
"""


def _uri(db: Path) -> str:
    return f"sqlite:///{db}"


def _store_with_runs(tmp_path: Path, runs: int = RUNS) -> Path:
    db = tmp_path / "mlflow.db"
    ensure_local_store(_uri(db), db)
    from mlflow import MlflowClient

    client = MlflowClient(tracking_uri=_uri(db))
    eid = client.create_experiment("guard/s")
    for _ in range(runs):
        client.set_terminated(client.create_run(eid).info.run_id)
    return db


def _kill_mid_transaction(db: Path) -> None:
    proc = subprocess.run(
        [sys.executable, "-c", textwrap.dedent(_KILLED_WRITER), str(db)],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == -signal.SIGKILL, proc.stderr
    assert Path(f"{db}-journal").stat().st_size > 0  # a hot journal is left


@pytest.mark.slow
def test_a_hot_journal_is_rolled_back_and_every_run_kept(tmp_path):
    db = _store_with_runs(tmp_path)
    _kill_mid_transaction(db)
    notes: list[str] = []
    ensure_local_store(_uri(db), db, say=notes.append)
    assert notes == []
    assert not list(tmp_path.glob("mlflow.db.broken-*"))
    assert not Path(f"{db}-journal").exists()
    con = sqlite3.connect(db)
    assert con.execute("pragma integrity_check").fetchall() == [("ok",)]
    assert con.execute("select count(*) from runs").fetchone()[0] == RUNS
    assert con.execute("select count(*) from metrics").fetchone()[0] == 0
    from mlflow import MlflowClient

    client = MlflowClient(tracking_uri=_uri(db))
    eid = client.get_experiment_by_name("guard/s").experiment_id
    assert len(client.search_runs([eid])) == RUNS


def test_a_store_failing_the_integrity_check_is_refused_and_left_in_place(tmp_path):
    db = tmp_path / "mlflow.db"
    con = sqlite3.connect(db)
    con.execute("create table runs (run_uuid text primary key, name text)")
    con.executemany("insert into runs values (?, ?)", [(str(i), "x" * 500) for i in range(400)])
    con.commit()
    con.close()
    data = bytearray(db.read_bytes())
    data[4096 * 3 : 4096 * 3 + 64] = b"\xff" * 64  # a damaged b-tree page
    db.write_bytes(bytes(data))
    assert probe(db)[2] is not None and probe(db)[1] is None  # unreadable is not empty
    with pytest.raises(StoreRefused) as info:
        ensure_local_store(_uri(db), db)
    msg = str(info.value)
    assert str(db) in msg and f"sqlite3 {db} .recover" in msg
    assert isinstance(info.value, TrackingError) and info.value.exit_code == 2
    assert db.read_bytes() == bytes(data)  # neither moved nor replaced
    assert not list(tmp_path.glob("mlflow.db.broken-*"))


def test_an_empty_half_created_store_moves_aside_with_its_journal(tmp_path):
    db = tmp_path / "mlflow.db"
    con = sqlite3.connect(db)
    con.execute("create table alembic_version (version_num text)")
    con.execute("insert into alembic_version values ('451aebb31d03')")
    con.commit()
    con.close()
    Path(f"{db}-wal").write_bytes(b"")  # a sidecar that must travel with it
    notes: list[str] = []
    ensure_local_store(_uri(db), db, say=notes.append)
    aside = [p for p in tmp_path.glob("mlflow.db.broken-*") if not p.name.endswith("-wal")]
    assert len(aside) == 1 and Path(f"{aside[0]}-wal").exists()
    assert not Path(f"{db}-wal").exists()
    assert "no runs" in notes[0]
    assert probe(db)[1] == 0 and probe(db)[2] is None


def test_a_stray_journal_never_meets_a_new_store(tmp_path):
    db = tmp_path / "mlflow.db"
    Path(f"{db}-journal").write_bytes(os.urandom(2048))
    ensure_local_store(_uri(db), db, say=lambda _m: None)
    assert not Path(f"{db}-journal").exists()
    assert list(tmp_path.glob("mlflow.db.broken-*-journal"))
    assert probe(db)[2] is None


def test_guard_run_refuses_a_corrupt_default_store_with_exit_2(tmp_path, workdir, capsys):
    from faults_helpers import small_convnet, suite_of

    from guard.cli.main import main

    suite = suite_of(tmp_path, {"m": small_convnet(tmp_path / "m.onnx")})
    (workdir / ".guard").mkdir()
    db = workdir / ".guard" / "mlflow.db"
    db.write_bytes(b"not a database, but someone's runs" * 200)
    assert main(["run", str(suite)]) == 2
    err = capsys.readouterr().err
    assert f"sqlite3 {db} .recover" in err and "Traceback" not in err
    assert db.read_bytes().startswith(b"not a database")
