"""Options and helpers that several comparison commands share (compare, ab, bump,
history): the regression statistics' flags, the report flags, the tracking URI."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import TYPE_CHECKING

from guard.stats.defaults import DEFAULT_REGRESS_PCT, DEFAULT_RUN_NOISE_PCT

if TYPE_CHECKING:
    from guard.compare.written import ComparisonDocumentJson
    from guard.stats.regress import RegressConfig


def stats_args(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--regress-pct",
        type=float,
        default=None,
        help=f"effect-size threshold in %% (default: each model's checks.latency.regress_pct, "
        f"else {DEFAULT_REGRESS_PCT}); a regression must also be significant",
    )
    p.add_argument(
        "--alpha",
        type=float,
        default=0.01,
        help="one-sided significance level (default %(default)s)",
    )
    p.add_argument(
        "--noise",
        type=Path,
        metavar="FILE",
        help="noise file from `guard calibrate` (default: .guard/noise/<suite>.json "
        "when it exists)",
    )
    p.add_argument("--strict", action="store_true", help="inconclusive rows also fail (exit 1)")


def report_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--json", type=Path, metavar="PATH", help="write the comparison document")
    p.add_argument("--markdown", type=Path, metavar="PATH", help="write the Markdown report")
    p.add_argument("--html", type=Path, metavar="PATH", help="write the HTML report")
    p.add_argument("--quiet", action="store_true", help="do not print the Markdown report")


def tracking_arg(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--tracking-uri",
        help="MLflow URI (default: MLFLOW_TRACKING_URI, else the local .guard store)",
    )


def config(args: argparse.Namespace) -> RegressConfig:
    from guard.stats.regress import RegressConfig  # numpy and scipy: when a command runs

    pct = DEFAULT_REGRESS_PCT if args.regress_pct is None else args.regress_pct
    run_noise = getattr(args, "run_noise_pct", None)
    return RegressConfig(
        regress_pct=pct,
        alpha=args.alpha,
        run_noise_pct=DEFAULT_RUN_NOISE_PCT if run_noise is None else run_noise,
    )


def emit(cmp: ComparisonDocumentJson, args: argparse.Namespace, title: str) -> None:
    from guard.compare.reports import to_markdown, write_reports
    from guard.results.documents import ComparisonDocument

    write_reports(cmp, json_path=args.json, md_path=args.markdown, html_path=args.html, title=title)
    if not args.quiet:
        sys.stdout.write(to_markdown(ComparisonDocument.from_json(cmp), title))
