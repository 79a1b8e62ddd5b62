"""Kill sweep: SIGKILL a tracked ``guard run`` at every named point, recover, count.

Not a timing benchmark: for each point of tests/faults/kill_trial.POINTS, a fresh
directory, ``guard run`` (two small convnets, embedded store ``.guard/mlflow.db``, ``--json``)
killed there by ``GUARD_FAULT=<point>``, then ``guard track push --pending`` and the next
``guard run``; it counts invocations lost, result runs doubled, invocations half visible
to a reader, stores moved aside or failing ``PRAGMA integrity_check``, temporary and
pending files left; then the MLflow-call points again against a server on PostgreSQL
(skipped with a line when PostgreSQL is not installed). Writes benchmarks/faults.md (and a JSON record with ``--out``).

    .venv/bin/python benchmarks/faults.py   # 20 trials, ~1.5 minutes each on 2 busy cores
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
sys.path.insert(0, str(ROOT / "tests" / "faults"))
sys.path.insert(0, str(ROOT / "tests" / "run"))
sys.path.insert(0, str(ROOT / "tests" / "scale"))

from kill_trial import POINTS, failures, trial  # noqa: E402

COMMAND = ".venv/bin/python benchmarks/faults.py"
COLUMNS = ("lost", "doubled", "half_visible", "moved", "integrity", "tmp_left", "pending_left")


def _yes(flag: bool) -> str:
    return "yes" if flag else "no"


def _table(rows: list[dict]) -> list[str]:
    head = "| store | kill point | killed | journalled | hot journal left | " + " | ".join(COLUMNS)
    lines = [head + " | verdict |", "|" + "---|" * (len(COLUMNS) + 6)]
    for r in rows:
        cells = [str(r[c]) for c in COLUMNS]
        verdict = "ok" if not failures(r) else "; ".join(failures(r))[:200]
        lines.append(
            f"| {r['store']} | `{r['point']}` | {_yes(r['killed'])} | {_yes(r['journalled'])} | "
            f"{_yes(r['hot_journal'])} | " + " | ".join(cells) + f" | {verdict} |"
        )
    return lines


def _server_rows(tmp: Path) -> list[dict]:
    """The MLflow-call points against a server on PostgreSQL (tests/scale's stack)."""
    from scale_stack import MlflowServer, PostgresCluster, missing_reason

    reason = missing_reason()
    if reason:
        print(f"PostgreSQL sweep skipped: {reason}")
        return []
    pg = PostgresCluster().start()
    server = MlflowServer(pg.uri, tmp / "server")
    rows = []
    try:
        server.start()
        for i, (point, journalled) in enumerate(POINTS):
            if not point.startswith(("journal", "mlflow.")):
                continue
            name = "pg_" + "".join(c if c.isalnum() else "_" for c in point)
            row = trial(
                point, journalled, tmp / f"pg{i}", server=server.url, db_uri=pg.uri,
                suite_name=name,
            )  # fmt: skip
            rows.append({**row, "store": "server on PostgreSQL"})
            print(f"postgres {point}: {failures(row) or 'ok'}", flush=True)
    finally:
        server.stop()
        pg.stop()
    return rows


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--md", default=str(HERE / "faults.md"))
    ap.add_argument("--out", help="also write the per-trial records as JSON")
    ap.add_argument("--no-server", action="store_true", help="skip the PostgreSQL sweep")
    args = ap.parse_args()
    os.environ.pop("MLFLOW_TRACKING_URI", None)
    os.environ.setdefault("MLFLOW_DISABLE_TELEMETRY", "true")
    rows = []
    t0 = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="guard-faults-") as tmp:
        for i, (point, journalled) in enumerate(POINTS):
            row = trial(point, journalled, Path(tmp) / f"t{i}")
            rows.append({**row, "store": "embedded sqlite"})
            print(f"{point}: {failures(row) or 'ok'}", flush=True)
        if not args.no_server:
            rows.extend(_server_rows(Path(tmp)))
    totals = {c: sum(int(r[c]) for r in rows) for c in COLUMNS}
    bad = [r["point"] for r in rows if failures(r)]
    md = [
        "# Kill sweep: nothing lost, nothing doubled, nothing half visible",
        "",
        f"Made by `{COMMAND}` ({time.strftime('%Y-%m-%d', time.gmtime())}, "
        f"{platform.machine()}, Python {platform.python_version()}, "
        f"{time.monotonic() - t0:.0f} s). Each row: a fresh directory; `guard run` of two "
        "small convnets with `--json`, tracking into the embedded store (`.guard/mlflow.db`) "
        "or an MLflow server on PostgreSQL (started on 127.0.0.1 for the sweep), SIGKILLed "
        "at the point (`GUARD_FAULT`); then `guard track push --pending` and the next "
        "`guard run`. Points before `journal` end before the results exist (nothing to "
        "keep); from `journal` on, the killed run's results must end up logged once. "
        "`store.transaction` kills inside MLflow's insert of a batch of metrics with a page "
        "cache of a few pages, so the store file holds half the transaction and a hot "
        "journal is left (column 'hot journal left').",
        "",
        f"- kill points tried: {len(rows)} (killed there: {sum(r['killed'] for r in rows)}; "
        f"embedded store {sum(r['store'] == 'embedded sqlite' for r in rows)}, PostgreSQL "
        f"server {sum(r['store'] != 'embedded sqlite' for r in rows)})",
        f"- invocations lost: {totals['lost']}",
        f"- result runs doubled: {totals['doubled']}",
        f"- invocations half visible to a reader (after the kill or after recovery): "
        f"{totals['half_visible']}",
        f"- stores moved aside: {totals['moved']}; failing integrity_check: {totals['integrity']}",
        f"- temporary files left: {totals['tmp_left']}; journal files not delivered: "
        f"{totals['pending_left']}",
        f"- trials with any failure: {len(bad)}{' (' + ', '.join(bad) + ')' if bad else ''}",
        "",
        *_table(rows),
        "",
        "The same sweeps run as tests (`pytest -m slow tests/faults/test_kill_points.py "
        "tests/faults/test_kill_points_server.py`).",
        "",
    ]
    Path(args.md).write_text("\n".join(md))
    if args.out:
        Path(args.out).write_text(json.dumps(rows, indent=2, default=str) + "\n")
    print(f"wrote {args.md}")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
