"""``guard ab``: an interleaved A/B of two variants or two commits in one process."""

from __future__ import annotations

import argparse
from pathlib import Path

from guard.cli.calibrate import noise_for
from guard.cli.options import config, emit, report_args, stats_args
from guard.core.errors import UsageError


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    a = subparsers.add_parser(
        "ab",
        help="interleaved A/B of two variants in one process, judged on paired ratios",
        description="Build both variants, then run them interleaved (AB, BA, ...) until the "
        "verdict is conclusive or the budget is spent. --base/--head are each a suite file "
        "(a variant: other session options, tuning cache, compiler flags) or a work "
        "directory holding that side's artefacts; unset means SUITE and the current "
        "directory. --base-ref REF (and optionally --head-ref REF, else the working tree) "
        "instead compares two commits of the suite's git repository: each side's tree, "
        "pinned environment (a cached venv when its pins differ) and, in guard's own "
        "repository, its own guard, each in a worker process, timed in alternation on "
        "this machine. Exit 1 only when a row regressed.",
    )
    a.add_argument("suite", type=Path)
    a.add_argument("--base", type=Path, help="suite variant (.yaml) or work directory")
    a.add_argument("--head", type=Path, help="suite variant (.yaml) or work directory")
    a.add_argument("--base-ref", metavar="REF", help="git commit/branch/tag of the base side")
    a.add_argument(
        "--head-ref", metavar="REF", help="git ref of the head side (default: the working tree)"
    )
    a.add_argument(
        "--env-cache",
        type=Path,
        help="where ref checkouts and venvs live (default ~/.cache/guard/envs, or GUARD_ENV_CACHE)",
    )
    a.add_argument(
        "--budget-s",
        type=float,
        default=20.0,
        help="measurement seconds per model, both sides together (default %(default)s)",
    )
    a.add_argument(
        "--counted",
        action="store_true",
        help="also count instructions and bytes moved per inference of both variants "
        "(or of both commits with --base-ref, each by its own guard; guard run --counted): "
        "a counted row per pair, exit 1 when a count regressed",
    )
    stats_args(a)
    report_args(a)
    a.set_defaults(func=cmd_ab)


def _warn_missing(missing: list[str]) -> None:
    import sys

    for line in missing[:1]:
        print(f"guard: warning: {line}; no counted rows", file=sys.stderr)


def cmd_ab(args: argparse.Namespace) -> int:
    from guard.compare.compare import exit_code
    from guard.experiment.ab import match_cases, run_case_pairs
    from guard.results.documents import ComparisonDocument
    from guard.run.case import prepare_cases
    from guard.suite import load_suite

    def side(p: Path | None) -> tuple[Path, Path]:
        if p is None:
            return args.suite, Path.cwd()
        if p.is_dir():
            return args.suite, p
        if p.is_file():
            return p, Path.cwd()
        raise UsageError("neither a suite file nor a directory", where=str(p))

    if not args.suite.is_file():
        raise UsageError("no such suite file", where=str(args.suite))
    missing: list[str] = []  # a line naming what counting needs, when it is not installed
    if args.head_ref and not args.base_ref:
        raise UsageError("--head-ref needs --base-ref", hint="guard ab SUITE --base-ref REF")
    if args.base_ref:
        if args.base or args.head:
            raise UsageError("give --base/--head (variants) or --base-ref (commits), not both")
        from guard.experiment.ab_ref import run_ref_ab

        suite = load_suite(args.suite)
        cmp = run_ref_ab(
            args.suite,
            args.base_ref,
            args.head_ref,
            config=config(args),
            noise=noise_for(args, suite.name, "paired"),
            budget_s=args.budget_s,
            suite_thresholds=args.regress_pct is None,
            env_cache=args.env_cache,
            threads=max(m.threads for m in suite.models),
            counted=args.counted,
            missing=missing,
        )
        _warn_missing(missing)
        emit(cmp, args, "guard ab")
        return exit_code(ComparisonDocument.from_json(cmp), strict=args.strict)
    (bs, bw), (hs, hw) = side(args.base), side(args.head)
    pairs = match_cases(prepare_cases(bs, bw), prepare_cases(hs, hw))
    suite_name = load_suite(args.suite).name
    cmp = run_case_pairs(
        pairs,
        config(args),
        noise=noise_for(args, suite_name, "paired"),
        budget_s=args.budget_s,
        suite_thresholds=args.regress_pct is None,
        labels=(f"{bs}@{bw}", f"{hs}@{hw}"),
    )
    if args.counted:
        from guard.counting.rows import summary
        from guard.run.counted import count_pairs

        cmp["counted"] = count_pairs(pairs, (bw, hw), missing)
        cmp["summary"]["counted"] = summary(cmp["counted"])
        _warn_missing(missing)
    emit(cmp, args, "guard ab")
    return exit_code(ComparisonDocument.from_json(cmp), strict=args.strict)
