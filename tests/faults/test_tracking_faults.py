"""Tracking under faults: pending files never overwrite each other, the embedded store is
created whole (or recovered), interrupted logging is marked and ignored, pushes are
idempotent under concurrency, a read-only .guard fails fast."""

from __future__ import annotations

import json
import multiprocessing
import os
import signal
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

import pytest
from faults_helpers import guard_subprocess, kill_when, small_convnet, suite_of

from guard.cli.main import main
from guard.core.errors import TrackingError
from guard.track import keep_results
from guard.track.store import ensure_local_store, head_revision

DEAD_SERVER = "http://127.0.0.1:9"


def _keep(args):
    doc, workdir, i = args
    return str(keep_results({**doc, "n": i}, Path(workdir)))


def test_concurrent_pending_files_never_overwrite(tmp_path):
    doc = {"schema_version": 1, "suite": "s", "started": "2026-12-01T08:00:00+00:00", "results": []}
    with multiprocessing.get_context("fork").Pool(8) as pool:
        paths = pool.map(_keep, [(doc, tmp_path, i) for i in range(32)])
    assert len(set(paths)) == 32
    kept = sorted(json.loads(Path(p).read_text())["n"] for p in paths)
    assert kept == list(range(32))
    assert not [p for p in (tmp_path / ".guard" / "pending").iterdir() if p.name.startswith(".")]


@pytest.mark.slow
def test_four_concurrent_runs_with_the_server_down_keep_four_result_sets(tmp_path, workdir):
    """Issue 16 serious case 1, re-run: 4 runs at once, tracking down, nothing lost."""
    suite = suite_of(tmp_path, {"m": small_convnet(tmp_path / "m.onnx")})
    assert main(["run", str(suite), "--no-track"]) == 0  # golden and artefact in place
    procs = [
        guard_subprocess(["run", str(suite), "--tracking-uri", DEAD_SERVER], workdir)
        for _ in range(4)
    ]
    for p in procs:
        _, err = p.communicate(timeout=300)
        assert p.returncode == 0 and "results kept at" in err, err  # kept: checks decide
    pending = sorted((workdir / ".guard" / "pending").glob("*.json"))
    assert len(pending) == 4
    docs = [json.loads(p.read_text()) for p in pending]
    assert all(d["results"][0]["verdict"] == "pass" for d in docs)


def _sqlite_uri(db: Path) -> str:
    return f"sqlite:///{db}"


@pytest.mark.slow
def test_kill_while_the_store_is_created_leaves_a_usable_store(tmp_path, workdir):
    """Issue 16 serious case 4, re-run: a kill while .guard/mlflow.db is first created."""
    suite = suite_of(tmp_path, {"m": small_convnet(tmp_path / "m.onnx")})
    marker = tmp_path / "migrating"
    patch = f"""
    import pathlib
    import mlflow.store.db.utils as u
    _up = u._upgrade_db
    def slow_upgrade(engine):
        _up(engine)
        pathlib.Path({str(marker)!r}).touch()
        time.sleep(600)
    u._upgrade_db = slow_upgrade
    """
    proc = guard_subprocess(["run", str(suite)], workdir, patch)
    kill_when(proc, marker, timeout_s=240)
    proc.wait(timeout=60)
    db = workdir / ".guard" / "mlflow.db"
    assert not db.exists()  # only the temporary store was half made
    assert main(["run", str(suite), "--json", str(tmp_path / "r.json")]) == 0
    doc = json.loads((tmp_path / "r.json").read_text())
    assert doc["tracking"]["parent_run_id"]
    assert not list((workdir / ".guard").glob(".mlflow.db.*.creating*"))


@pytest.mark.slow
def test_concurrent_first_runs_create_the_store_once(tmp_path):
    db = tmp_path / "mlflow.db"
    code = (
        "import sys; from pathlib import Path; from guard.track.uri import check_reachable;"
        f"check_reachable({_sqlite_uri(db)!r})"
    )
    procs = [
        subprocess.Popen([sys.executable, "-c", code], stderr=subprocess.PIPE, text=True)
        for _ in range(3)
    ]
    for p in procs:
        _, err = p.communicate(timeout=300)
        assert p.returncode == 0, err
    con = sqlite3.connect(db)
    assert con.execute("select version_num from alembic_version").fetchone()[0] == head_revision()
    assert con.execute("select count(*) from experiments").fetchone()[0] == 1


def _made_store(tmp_path: Path, with_run: bool) -> Path:
    db = tmp_path / "mlflow.db"
    ensure_local_store(_sqlite_uri(db), db)
    if with_run:
        from mlflow import MlflowClient

        client = MlflowClient(tracking_uri=_sqlite_uri(db))
        client.set_terminated(client.create_run("0").info.run_id)
    con = sqlite3.connect(db)
    con.execute("update alembic_version set version_num = '451aebb31d03'")  # mid-migration
    con.commit()
    con.close()
    return db


@pytest.mark.slow
def test_half_created_store_without_runs_is_recreated(tmp_path):
    db = _made_store(tmp_path, with_run=False)
    notes = []
    ensure_local_store(_sqlite_uri(db), db, say=notes.append)
    assert len(notes) == 1 and "moved it to" in notes[0]
    assert list(tmp_path.glob("mlflow.db.broken-*"))
    con = sqlite3.connect(db)
    assert con.execute("select version_num from alembic_version").fetchone()[0] == head_revision()


@pytest.mark.slow
def test_half_migrated_store_with_runs_says_which_command_fixes_it(tmp_path, capsys):
    db = _made_store(tmp_path, with_run=True)
    with pytest.raises(TrackingError) as info:
        ensure_local_store(_sqlite_uri(db), db)
    msg = str(info.value)
    assert "holds 1 run(s)" in msg and f"mlflow db upgrade {_sqlite_uri(db)}" in msg
    assert f"mv {db}" in msg
    # The second way out the message gives works (the first is MLflow's own migration).
    db.rename(f"{db}.broken")
    ensure_local_store(_sqlite_uri(db), db)
    assert Path(f"{db}.broken").exists()


@pytest.mark.slow
@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT])
def test_signal_while_logging_marks_runs_killed_and_keeps_results(tmp_path, workdir, sig):
    """Issue 16 item 9: a kill during MLflow logging used to keep nothing."""
    suite = suite_of(
        tmp_path, {"a": small_convnet(tmp_path / "a.onnx"), "b": small_convnet(tmp_path / "b.onnx")}
    )
    marker = tmp_path / "logging"
    patch = f"""
    import pathlib
    import guard.track.log as log
    _child = log._log_child
    def slow_child(*a, **k):
        out = _child(*a, **k)
        pathlib.Path({str(marker)!r}).touch()
        time.sleep(600)
        return out
    log._log_child = slow_child
    """
    out = tmp_path / "r.json"
    proc = guard_subprocess(["run", str(suite), "--json", str(out)], workdir, patch)
    kill_when(proc, marker, sig, timeout_s=240)
    _, err = proc.communicate(timeout=120)
    assert proc.returncode == 128 + sig, err
    doc = json.loads(out.read_text())
    assert doc["interrupted"] == signal.Signals(sig).name
    kept = Path(doc["tracking"]["kept"])
    assert [r["verdict"] for r in json.loads(kept.read_text())["results"]] == ["pass", "pass"]
    from mlflow import MlflowClient

    from guard.track import find_runs

    uri = _sqlite_uri(workdir / ".guard" / "mlflow.db")
    client = MlflowClient(tracking_uri=uri)
    exp = client.get_experiment_by_name("guard/faults")
    runs = client.search_runs([exp.experiment_id])
    statuses = sorted(r.info.status for r in runs)
    # The parent KILLED; the one child logged whole stays FINISHED, tagged, not counted.
    assert statuses == ["FINISHED", "KILLED"]
    assert [
        r.data.tags.get("guard.parent_killed") for r in runs if r.info.status == "FINISHED"
    ] == ["KILLED"]
    assert find_runs(uri, "faults").empty  # readers ignore them
    # The kept results push cleanly, finishing that invocation: readers see it, once.
    assert main(["track", "push", str(kept), "--tracking-uri", uri]) == 0
    assert len(find_runs(uri, "faults")) == 2
    assert len(client.search_runs([exp.experiment_id])) == 3


@pytest.mark.slow
def test_concurrent_pushes_of_one_file_log_it_once(tmp_path, workdir):
    suite = suite_of(tmp_path, {"m": small_convnet(tmp_path / "m.onnx")})
    out = tmp_path / "r.json"
    assert main(["run", str(suite), "--no-track", "--json", str(out)]) == 0
    db = workdir / ".guard" / "mlflow.db"
    ensure_local_store(_sqlite_uri(db), db)  # the store exists: the race is on the push
    procs = [
        guard_subprocess(["track", "push", str(out), "--tracking-uri", _sqlite_uri(db)], workdir)
        for _ in range(2)
    ]
    outs = [p.communicate(timeout=300) for p in procs]
    assert [p.returncode for p in procs] == [0, 0], outs
    assert sum("already logged" in o for o, _ in outs) == 1
    from guard.track import find_runs

    assert len(find_runs(_sqlite_uri(db), "faults", level="invocation")) == 1


def test_read_only_guard_dir_fails_fast_and_keeps_json(tmp_path, workdir, capsys):
    """Issue 16 item 13: a read-only .guard used to cost ~100 s of MLflow retries."""
    suite = suite_of(tmp_path, {"m": small_convnet(tmp_path / "m.onnx")})
    gd = workdir / ".guard"
    gd.mkdir()
    root = os.geteuid() == 0
    if root:
        if (
            subprocess.run(
                ["mount", "-t", "tmpfs", "-o", "ro,size=1m", "tmpfs", str(gd)], capture_output=True
            ).returncode
            != 0
        ):
            pytest.skip("cannot mount a read-only tmpfs")
    else:
        gd.chmod(0o555)
    try:
        out = tmp_path / "r.json"
        t0 = time.monotonic()
        code = main(
            [
                "run",
                str(suite),
                "--json",
                str(out),
                "--golden-dir",
                str(tmp_path / "goldens"),
                "--no-track",
            ]
        )
        assert code == 2  # the artefact cannot be built in a read-only .guard either
        code = main(["run", str(suite), "--json", str(out)])
        elapsed = time.monotonic() - t0
        err = capsys.readouterr().err
        assert code == 2 and elapsed < 60
        assert "is not writable" in err or "read-only" in err
        assert "Traceback" not in err and len(err.splitlines()) < 40
        assert json.loads(out.read_text())["results"]
    finally:
        if root:
            subprocess.run(["umount", "-l", str(gd)], check=False)
        else:
            gd.chmod(0o755)


@pytest.mark.slow
def test_full_disk_while_the_store_is_created_leaves_nothing_half_made(tmp_path):
    """Issue 16 serious case 4: a full disk during the first creation of mlflow.db."""
    disk = tmp_path / "disk"
    disk.mkdir()
    if (
        os.geteuid() != 0
        or subprocess.run(
            ["mount", "-t", "tmpfs", "-o", "size=256k", "tmpfs", str(disk)], capture_output=True
        ).returncode
        != 0
    ):
        pytest.skip("needs root to mount a size-limited tmpfs")
    try:
        db = disk / "mlflow.db"
        with pytest.raises(TrackingError) as info:
            ensure_local_store(_sqlite_uri(db), db)
        assert "cannot create the local tracking store" in str(info.value)
        assert not db.exists() and not list(disk.glob(".mlflow.db.*.creating*"))
        subprocess.run(["mount", "-o", "remount,size=16m", str(disk)], check=True)
        ensure_local_store(_sqlite_uri(db), db)  # with space, the next run just works
        assert (
            sqlite3.connect(db).execute("select version_num from alembic_version").fetchone()[0]
            == head_revision()
        )
    finally:
        subprocess.run(["umount", "-l", str(disk)], check=False)
