"""CLI for MLflow tracking: track push and dashboard.

guard/cli/main.py calls ``register(subparsers)``; each command's ``func(args) -> int`` returns
the exit code and raises GuardError subclasses for input it cannot use.
"""

from __future__ import annotations

import argparse
from pathlib import Path

from guard.core.errors import EXIT_OK


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Add track and dashboard to guard's subcommands."""
    t = subparsers.add_parser("track", help="MLflow tracking")
    tsub = t.add_subparsers(dest="track_command", metavar="ACTION", required=True)
    tp = tsub.add_parser("push", help="send a results file kept locally to a tracking server")
    tp.add_argument("path")
    tp.add_argument("--tracking-uri", metavar="URI")
    tp.set_defaults(func=cmd_track_push)

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


def cmd_track_push(args: argparse.Namespace) -> int:
    from guard.track import push, resolve_uri

    uri = resolve_uri(args.tracking_uri, Path.cwd())
    receipt = push(Path(args.path), uri)
    if receipt.get("already_tracked"):
        print(
            f"{args.path} is already logged at {uri} (parent run "
            f"{receipt.get('parent_run_id')}): nothing sent"
        )
    else:
        print(f"pushed {args.path} to {uri}: parent run {receipt.get('parent_run_id')}")
    return EXIT_OK


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
