"""One kill trial: ``guard run`` SIGKILLed at a named point (GUARD_FAULT), then the next
``guard track push --pending`` and ``guard run``, and what a reader then sees.

Shared by tests/faults/test_kill_points.py and benchmarks/faults.py (a uniquely named
module, not conftest). Counts, per trial:

- ``lost``: the killed run's results were journalled (the kill came at or after the
  journal point) but are not a FINISHED invocation with all its results after recovery;
- ``doubled``: result runs sharing a ``guard.child_key``, or parents sharing a results
  digest, among the store's live runs;
- ``half_visible``: an invocation a reader (guard.track.find_runs) sees with fewer or more
  result runs than it has results, or a result run it sees without its parent, checked
  right after the kill and again after recovery;
- ``moved``: files ``mlflow.db.broken-*``; ``integrity``: the store fails
  ``PRAGMA integrity_check``; ``tmp_left``: ``.*.tmp`` files left; ``pending_left``:
  journal files not delivered by the push; ``hot_journal``: a sqlite ``-journal`` was left
  beside the embedded store by the kill (what the next run must roll back).
"""

from __future__ import annotations

from collections import Counter
from pathlib import Path

from faults_helpers import guard_subprocess, small_convnet, suite_of

# (point, whether the killed run's results were journalled before the kill)
POINTS: list[tuple[str, bool]] = [
    ("build", False),
    ("measure", False),
    ("atomic_write:r.json", False),
    ("journal", True),
    ("mlflow.create_parent", True),
    ("mlflow.log_parent", True),
    ("mlflow.log_results_json", True),
    ("mlflow.log_child", True),
    ("mlflow.log_child@2", True),
    ("store.transaction", True),
    ("mlflow.finish_parent", True),
    ("mlflow.finished", True),
]
MODELS = 2
SUITE = "faults"


def _run(argv: list[str], cwd: Path, env: dict | None = None, timeout: float = 600) -> tuple:
    proc = guard_subprocess(argv, cwd, env=env)
    out, err = proc.communicate(timeout=timeout)
    return proc.returncode, out, err


def _visible(uri: str, suite: str = SUITE) -> tuple[int, int]:
    """(invocations a reader sees whole, ones it sees in part) through find_runs."""
    from guard.track import find_runs

    f = find_runs(uri, suite, level=None)
    if f.empty:
        return 0, 0
    cols = ["run_id", "tags.guard.level", "tags.mlflow.parentRunId", "metrics.results.total"]
    rows = f[cols].astype(object).where(f[cols].notna(), None).values.tolist()
    parents = {r[0]: int(r[3] or 0) for r in rows if r[1] == "invocation"}
    kids = Counter(r[2] for r in rows if r[1] == "result")
    half = sum(1 for p in kids if p not in parents)
    half += sum(1 for p, total in parents.items() if kids.get(p, 0) != total)
    whole = sum(1 for p, total in parents.items() if kids.get(p, 0) == total)
    return whole, half


def _push_pending(work: Path, flags: list[str]) -> tuple[int, str]:
    """``guard track push --pending`` in this process (mlflow is imported once)."""
    import contextlib
    import io

    from guard.cli.main import main

    err = io.StringIO()
    with contextlib.chdir(work), contextlib.redirect_stderr(err), contextlib.redirect_stdout(err):
        rc = main(["track", "push", "--pending", *flags])
    return rc, err.getvalue()


_SCOPE = (
    "from tags t join runs r on r.run_uuid = t.run_uuid "
    "join experiments e on e.experiment_id = r.experiment_id "
    "where e.name = :exp and r.lifecycle_stage = 'active' and t.key = :key"
)


def _store_counts(db_uri: str, suite: str) -> dict:
    """Doubles and FINISHED digests in the suite's experiment, read from the database
    itself (sqlite or PostgreSQL, MLflow's schema), and the sqlite integrity check."""
    import sqlalchemy as sa

    if db_uri.startswith("postgresql://"):  # psycopg 3, the driver MLflow's extra installs
        db_uri = "postgresql+psycopg://" + db_uri[len("postgresql://") :]
    engine = sa.create_engine(db_uri)
    exp = f"guard/{suite}"
    try:
        with engine.connect() as con:
            ok = True
            if db_uri.startswith("sqlite"):
                ok = con.exec_driver_sql("pragma integrity_check").fetchall() == [("ok",)]
            keys = con.execute(
                sa.text(f"select t.value {_SCOPE}"), {"exp": exp, "key": "guard.child_key"}
            ).fetchall()
            parents = con.execute(
                sa.text(f"select t.value, r.status {_SCOPE}"),
                {"exp": exp, "key": "guard.results_sha256"},
            ).fetchall()
    finally:
        engine.dispose()
    doubled = sum(n - 1 for n in Counter(k for (k,) in keys).values() if n > 1)
    doubled += sum(n - 1 for n in Counter(d for d, _ in parents).values() if n > 1)
    finished = {d for d, status in parents if status == "FINISHED"}
    return {"integrity": 0 if ok else 1, "doubled": doubled, "finished": finished}


def trial(
    point: str,
    journalled: bool,
    root: Path,
    server: str | None = None,
    db_uri: str | None = None,
    suite_name: str = SUITE,
) -> dict:
    """Kill ``guard run`` at ``point`` in a fresh directory under ``root``; recover; count.

    ``server``: a tracking server's URI (its database at ``db_uri``), else the embedded
    store ``.guard/mlflow.db``."""
    root.mkdir(parents=True, exist_ok=True)
    work = root / "work"
    work.mkdir()
    models = {f"m{i}": small_convnet(root / f"m{i}.onnx") for i in range(MODELS)}
    suite = suite_of(root, models, name=suite_name)
    db = work / ".guard" / "mlflow.db"
    uri = server or f"sqlite:///{db}"
    db_uri = db_uri or uri
    flags = ["--tracking-uri", server] if server else []
    argv = ["run", str(suite), "--json", str(root / "r.json"), *flags]
    rc, _, err = _run(argv, work, env={"GUARD_FAULT": point})
    out: dict = {"point": point, "killed": rc == -9, "stderr": err[-1500:]}
    pending = work / ".guard" / "pending"
    journals = sorted(pending.glob("*.json")) if pending.is_dir() else []
    digest16 = journals[0].stem.rsplit("-", 1)[-1] if journals else None
    out["journalled"] = digest16 is not None
    journal_file = Path(f"{db}-journal")  # the hot journal a kill mid-transaction leaves
    out["hot_journal"] = journal_file.is_file() and journal_file.stat().st_size > 0
    half_after_kill = _visible(uri, suite_name)[1] if server or db.exists() else 0
    rc_push, err_push = _push_pending(work, flags)
    rc_next, _, err_next = _run(argv, work)
    out["push_rc"], out["next_rc"] = rc_push, rc_next
    out["errors"] = (err_push[-800:] if rc_push else "") + (err_next[-800:] if rc_next else "")
    whole, half = _visible(uri, suite_name)
    counts = _store_counts(db_uri, suite_name)
    logged = digest16 is not None and any(d.startswith(digest16) for d in counts["finished"])
    out.update(
        lost=int(journalled and not logged),
        doubled=counts["doubled"],
        half_visible=half_after_kill + half,
        integrity=counts["integrity"],
        moved=len(list(db.parent.glob("mlflow.db.broken-*"))) if db.parent.is_dir() else 0,
        invocations=whole,
        expected_invocations=2 if journalled else 1,
        tmp_left=len(list(root.rglob(".*.tmp"))),
        pending_left=len(list(pending.glob("*.json"))) if pending.is_dir() else 0,
    )
    return out


def failures(out: dict) -> list[str]:
    """What a trial got wrong (empty when nothing was lost, doubled or half visible)."""
    bad = [k for k in ("lost", "doubled", "half_visible", "integrity", "moved") if out[k]]
    bad += [k for k in ("tmp_left", "pending_left") if out[k]]
    if not out["killed"]:
        bad.append("not killed at the point")
    if out["push_rc"] != 0 or out["next_rc"] != 0:
        bad.append(f"push rc {out['push_rc']}, next run rc {out['next_rc']}: {out['errors']}")
    if out["invocations"] != out["expected_invocations"]:
        bad.append(f"{out['invocations']} whole invocations, not {out['expected_invocations']}")
    return bad
