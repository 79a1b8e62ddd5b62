"""``guard compare [BASE] HEAD``: is HEAD worse than BASE, beyond noise?"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from guard.cli.calibrate import noise_for
from guard.cli.options import config, emit, report_args, stats_args, tracking_arg
from guard.core.errors import UsageError
from guard.stats.defaults import DEFAULT_RUN_NOISE_PCT


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    c = subparsers.add_parser(
        "compare",
        help="is HEAD worse than BASE, beyond noise? (results files or MLflow)",
        description="guard compare [BASE] HEAD. A side is a results file (guard run --json), "
        "run:<id> (an MLflow invocation), or branch:<name> (for each model of HEAD, the "
        "latest run on that branch whose host class matches). Without BASE, the baseline is "
        "--baseline FILE, else branch:<--baseline-branch> (default main). "
        "Exit 1 when any row regressed.",
    )
    c.add_argument(
        "sides",
        nargs="+",
        metavar="SIDE",
        help="[BASE] HEAD: results file, run:<id>, or (BASE only) branch:<name>",
    )
    c.add_argument("--baseline", metavar="FILE", help="the baseline results file (instead of BASE)")
    c.add_argument(
        "--baseline-branch",
        default="main",
        help="branch whose MLflow runs are the baseline when none is given (default %(default)s)",
    )
    c.add_argument("--suite", help="suite name for branch: sides (default: the other side's)")
    c.add_argument(
        "--run-noise-pct",
        type=float,
        default=None,
        help="SD in %% of a whole run's level that its rounds cannot see (a disturbance "
        "longer than the run), added to each side (default: each result's from `guard "
        f"calibrate --runs`, else {DEFAULT_RUN_NOISE_PCT}; 0 trusts the rounds)",
    )
    tracking_arg(c)
    stats_args(c)
    report_args(c)
    c.set_defaults(func=cmd_compare)


def cmd_compare(args: argparse.Namespace) -> int:
    from guard.compare.baseline import is_mlflow_spec, load_side
    from guard.compare.compare import compare_docs, exit_code
    from guard.results.documents import ComparisonDocument

    if len(args.sides) > 2:
        raise UsageError(f"expected [BASE] HEAD, got {len(args.sides)} sides")
    if len(args.sides) == 2 and args.baseline:
        raise UsageError("give BASE or --baseline, not both")
    head_spec = args.sides[-1]
    base_spec = (
        args.sides[0] if len(args.sides) == 2 else args.baseline or f"branch:{args.baseline_branch}"
    )
    if head_spec.startswith(("branch:", "mlflow:")):
        raise UsageError(f"{head_spec}: HEAD must be a results file or run:<id>")
    uri = None
    if is_mlflow_spec(base_spec) or is_mlflow_spec(head_spec):
        from guard.track import resolve_uri

        uri = resolve_uri(args.tracking_uri, Path.cwd())
    head = load_side(head_spec, uri=uri, suite=args.suite)
    base = load_side(base_spec, uri=uri, suite=args.suite, other=head)
    for spec, doc in ((base_spec, base), (head_spec, head)):
        if not doc.results:
            raise UsageError(
                f"{spec}: holds no results: nothing to compare",
                hint="Pass a results file of a run that ran at least one case.",
            )
    cmp = compare_docs(
        base,
        head,
        config(args),
        noise=noise_for(args, head.suite),
        # An explicit --run-noise-pct is the user's word for every row; else calibration's.
        run_noise=noise_for(args, head.suite, "run") if args.run_noise_pct is None else None,
        suite_thresholds=args.regress_pct is None,
        base_label=base_spec,
        head_label=head_spec,
    )
    missing = ComparisonDocument.from_json(cmp).summary.without_rounds
    if missing:
        print(
            f"guard: warning: {len(missing)} row(s) compared with a result that has no rounds "
            f"({', '.join(missing[:3])}{', ...' if len(missing) > 3 else ''}): a results file "
            "from a guard that measured in one session gets no latency verdict; re-run "
            "`guard run --json` with this guard",
            file=sys.stderr,
        )
    emit(cmp, args, "guard compare")
    return exit_code(ComparisonDocument.from_json(cmp), strict=args.strict)
