"""``guard dashboard``: the suite's MLflow history as an HTML dashboard."""

from __future__ import annotations

import argparse
from pathlib import Path

from guard.core.errors import EXIT_OK


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    db = subparsers.add_parser(
        "dashboard",
        help="an interactive HTML dashboard of a suite's MLflow history",
        description="Writes one self-contained HTML page (no network needed to view it): per "
        "(model, backend, target, arch) the p50 trend with its p10-p90 band, the suite's bound, "
        "change points (as guard history finds them), manifest changes, arena, partitions and "
        "max error; a regressions list; filters; links to the MLflow runs.",
    )
    db.add_argument(
        "suite",
        help="suite name (experiment guard/<suite>) or suite file (its "
        "bounds are drawn); an unknown one is exit 2",
    )
    db.add_argument(
        "--out", metavar="PATH", help="where to write the page (default: dashboards/<suite>.html)"
    )
    db.add_argument(
        "--tracking-uri",
        metavar="URI",
        help="MLflow URI (default: $MLFLOW_TRACKING_URI, else .guard/mlflow.db)",
    )
    db.set_defaults(func=cmd_dashboard)


def cmd_dashboard(args: argparse.Namespace) -> int:
    from guard.report.dashboard import write_dashboard
    from guard.track import resolve_uri

    uri = resolve_uri(args.tracking_uri, Path.cwd())
    out = Path(args.out) if args.out else Path("dashboards") / f"{Path(args.suite).stem}.html"
    if not args.out:
        out.parent.mkdir(parents=True, exist_ok=True)
    counts = write_dashboard(args.suite, uri, out)
    what = {"empty": "no runs logged yet", "deleted": "the experiment was deleted"}
    detail = what.get(counts["state"]) or (
        f"{counts['series']} series, {counts['results']} result run(s), "
        f"{counts['invocations']} invocation(s), {counts['regressions']} change point(s)"
    )
    print(f"wrote {out}: guard/{counts['suite']}: {detail}")
    return EXIT_OK
