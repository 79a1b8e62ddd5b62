"""``guard bisect SUITE --good REF --bad REF``: the first regressed commit, by paired A/B."""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from guard.cli.options import config, stats_args
from guard.core.errors import EXIT_CHECK_FAILED, EXIT_OK, UsageError


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    b = subparsers.add_parser(
        "bisect", help="find the first commit whose change regressed, by paired guard ab steps"
    )
    b.add_argument("suite", type=Path)
    b.add_argument("--good", required=True, metavar="REF", help="a commit that is not regressed")
    b.add_argument("--bad", required=True, metavar="REF", help="a later commit that is")
    b.add_argument(
        "--budget-s",
        type=float,
        default=20.0,
        help="measurement seconds per model and step, both sides together (default %(default)s)",
    )
    b.add_argument(
        "--env-cache",
        type=Path,
        help="where checkouts and venvs live (default ~/.cache/guard/envs, or GUARD_ENV_CACHE)",
    )
    b.add_argument("--json", type=Path, metavar="PATH", help="write the steps and the answer")
    stats_args(b)
    b.set_defaults(func=cmd_bisect)


def cmd_bisect(args: argparse.Namespace) -> int:
    from guard.cli.calibrate import noise_for
    from guard.experiment.ab_ref import repo_root, run_ref_ab
    from guard.experiment.bisect import bisect, commits_between, max_steps
    from guard.results.documents import ComparisonDocument
    from guard.suite import load_suite

    if not args.suite.is_file():
        raise UsageError("no such suite file", where=str(args.suite))
    suite = load_suite(args.suite)
    good, bad, commits = commits_between(repo_root(args.suite.resolve()), args.good, args.bad)
    cfg = config(args)
    noise = noise_for(args, suite.name, "paired")
    threads = max(m.threads for m in suite.models)
    print(
        f"guard bisect: {len(commits)} commits after {good[:12]} up to {bad[:12]}; at most "
        f"{max_steps(len(commits))} steps"
    )

    def step(base: str, head: str) -> ComparisonDocument:
        return ComparisonDocument.from_json(run_ref_ab(
            args.suite, base, head, config=cfg, noise=noise, budget_s=args.budget_s,
            suite_thresholds=args.regress_pct is None, env_cache=args.env_cache, threads=threads,
        ))  # fmt: skip

    res = bisect(good, bad, commits, step)
    if args.json:
        args.json.write_text(json.dumps(res.to_dict(), indent=1) + "\n")
    if res.first_regressed is None:
        return EXIT_OK
    if res.ambiguous:
        print(
            f"guard bisect: the first regressed commit is one of {', '.join(c[:12] for c in res.ambiguous)} "
            f"or {res.first_regressed[:12]} (the others do not build)"
        )
    else:
        print(
            f"guard bisect: first regressed commit: {res.first_regressed} ({len(res.steps)} steps)"
        )
    return EXIT_CHECK_FAILED
