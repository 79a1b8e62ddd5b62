"""``guard run``: build, measure, check and log a suite (default: suites/default.yaml),
or one shard of it (``--shard K/N``)."""

from __future__ import annotations

import argparse
from pathlib import Path

from guard.core.errors import (
    UsageError,
)

DEFAULT_SUITE = "default.yaml"


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    r = subparsers.add_parser(
        "run", help="build, measure, check and log a suite (default: suites/default.yaml)"
    )
    r.add_argument("suite", nargs="?", help="suite file (default: suites/default.yaml)")
    r.add_argument("--json", metavar="PATH", help="write the results file (contract v1)")
    r.add_argument("--junit", metavar="PATH", help="write JUnit XML")
    r.add_argument("--markdown", metavar="PATH", help="write a Markdown summary")
    r.add_argument("--html", metavar="PATH", help="write an HTML report")
    r.add_argument(
        "--tracking-uri",
        metavar="URI",
        help="MLflow tracking URI (default: $MLFLOW_TRACKING_URI, else a local "
        "sqlite store under .guard/)",
    )
    r.add_argument("--no-track", action="store_true", help="do not log to MLflow")
    r.add_argument(
        "--require-tracking",
        action="store_true",
        help="exit 2 when the results cannot be logged (default: a warning; the "
        "checks decide the exit code and the results are kept for "
        "`guard track push`)",
    )
    r.add_argument(
        "--baseline",
        metavar="RESULTS.json",
        help="judge latency.regress_pct against this earlier results file "
        "(significant and large; see guard compare)",
    )
    r.add_argument(
        "--base-branch",
        metavar="BRANCH",
        help="with tracking and no --baseline, print the comparison with the last finished "
        "run of this suite on BRANCH (default: $GITHUB_BASE_REF, set on pull requests)",
    )
    r.add_argument(
        "--no-base-compare",
        action="store_true",
        help="do not look up or print the base branch comparison",
    )
    r.add_argument(
        "--counted",
        action="store_true",
        help="also count instructions and bytes moved per inference under an emulator "
        "(measure.counted in the suite sets it per model; identical across processes)",
    )
    r.add_argument(
        "--counted-engine",
        choices=("auto", "emulator", "pmu"),
        help="who counts (implies --counted; overrides measure.counted.engine): pmu, the "
        "host's hardware instruction counter at native speed (no bytes); emulator; auto "
        "(default): pmu where the host has one and the artefact runs here, else the "
        "emulator, and the run says why",
    )
    r.add_argument(
        "--golden-dir", metavar="DIR", help="golden store (default: <suite dir>/goldens/<suite>)"
    )
    r.add_argument("--model", action="append", metavar="NAME", help="only this model (repeatable)")
    r.add_argument(
        "--backend", action="append", metavar="NAME", help="only this backend (repeatable)"
    )
    g = r.add_argument_group("sharding (guard.run.shard)")
    g.add_argument(
        "--shard",
        metavar="K/N",
        help="run only shard K of N: a deterministic slice of the (model, "
        "backend, target) cases, balanced by the previous run's times",
    )
    g.add_argument(
        "--shard-times",
        metavar="RESULTS.json",
        help="balance by this results file's duration_s (e.g. the last merged "
        "run) instead of the MLflow history",
    )
    g.add_argument(
        "--invocation-id",
        metavar="ID",
        help="the shared id of all shards of one run (default "
        "$GUARD_INVOCATION_ID; on GitHub Actions the workflow run)",
    )
    r.set_defaults(func=cmd_run)


def default_suite() -> Path:
    """suites/default.yaml in the working directory, else the one shipped beside guard."""
    here = Path.cwd() / "suites" / DEFAULT_SUITE
    if here.is_file():
        return here
    # Package data (guard/suites, a link to the repository's suites/ in a checkout).
    shipped = Path(__file__).resolve().parents[1] / "suites" / DEFAULT_SUITE
    if shipped.is_file():
        return shipped
    raise UsageError(
        "no suite given and no suites/default.yaml here",
        hint="Pass a suite file: guard run path/to/suite.yaml.",
    )


def cmd_run(args: argparse.Namespace) -> int:
    from guard.run.runner import RunOptions, run_suite

    suite = Path(args.suite) if args.suite else default_suite()
    baseline = None
    if args.baseline:
        from guard.results.load import read_results

        baseline = read_results(args.baseline)
    opts = RunOptions(
        workdir=Path.cwd(),
        json_path=Path(args.json) if args.json else None,
        junit_path=Path(args.junit) if args.junit else None,
        markdown_path=Path(args.markdown) if args.markdown else None,
        html_path=Path(args.html) if args.html else None,
        tracking_uri=args.tracking_uri,
        track=not args.no_track,
        golden_root=Path(args.golden_dir) if args.golden_dir else None,
        models=tuple(args.model or ()),
        backends=tuple(args.backend or ()),
        baseline=baseline,
        shard=getattr(args, "shard", None),
        shard_times=Path(args.shard_times) if getattr(args, "shard_times", None) else None,
        invocation_id=getattr(args, "invocation_id", None),
        require_tracking=args.require_tracking,
        counted=args.counted or args.counted_engine is not None,
        counted_engine=args.counted_engine,
    )
    doc, code = run_suite(suite, opts)
    if opts.track and baseline is None and not args.no_base_compare and code < 128:
        from guard.results.documents import ResultsDocument
        from guard.run.base_compare import base_branch, compare_with_base

        branch = base_branch(args.base_branch)
        if branch:
            compare_with_base(ResultsDocument.from_json(doc), branch, workdir=opts.workdir)
    return code
