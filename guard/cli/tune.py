"""``guard tune SUITE``: tune a suite's models into a tuning cache (the nightly job): the
bundled backend's GEMM and convolution schedules (guard.prepare.tune), or TVM MetaSchedule."""

from __future__ import annotations

import argparse
from pathlib import Path

from guard.core.errors import EXIT_OK, UsageError


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    tu = subparsers.add_parser(
        "tune",
        help="tune a suite's models into a tuning cache (the nightly "
        "job): bundled GEMM/conv schedules, or tvm MetaSchedule",
    )
    tu.add_argument("suite")
    tu.add_argument(
        "--backend",
        choices=("bundled", "tvm"),
        help="which backend's models to tune (default: tvm with --db, else bundled)",
    )
    tu.add_argument(
        "--cache",
        metavar="PATH",
        help="bundled: the cache file to write (default: the suite's options.bundled.tuning_cache)",
    )
    tu.add_argument(
        "--budget-s",
        type=float,
        default=120.0,
        metavar="S",
        help="bundled: wall-clock budget for the whole suite (default 120)",
    )
    tu.add_argument(
        "--reps",
        type=int,
        default=7,
        help="bundled: timed rounds per candidate, after 2 warm-up rounds (default 7)",
    )
    tu.add_argument("--db", metavar="DIR", help="tvm: JSON database directory")
    tu.add_argument("--trials", type=int, default=64, help="tvm: trials per model (default 64)")
    tu.add_argument("--model", action="append", metavar="NAME", help="only this model")
    tu.set_defaults(func=cmd_tune)


def cmd_tune(args: argparse.Namespace) -> int:
    from guard.backends.tvm_tuning import tune
    from guard.manifest import canonicalize
    from guard.run.case import prepare_model
    from guard.suite import load_suite

    if args.trials < 1:
        raise UsageError(f"--trials must be >= 1, got {args.trials}")
    suite = load_suite(args.suite)
    # --db names a MetaSchedule database: without --backend it means tvm, as it always did.
    if (args.backend or ("tvm" if args.db else "bundled")) == "bundled":
        from guard.prepare.tune import tune_bundled

        return tune_bundled(args, suite)
    if not args.db:
        raise UsageError(
            "--db DIR is required with --backend tvm",
            hint="Name the MetaSchedule database directory to write.",
        )
    chosen = [
        m for m in suite.models if "tvm" in m.backends and (not args.model or m.name in args.model)
    ]
    if not chosen:
        raise UsageError(
            f"no model of suite {suite.name} lists the tvm backend"
            + (f" among {', '.join(args.model)}" if args.model else ""),
            where=str(suite.path),
            hint="Add tvm to a model's backends.",
        )
    for entry in chosen:
        spec, path = prepare_model(entry)
        out = tune(path, spec.shapes, canonicalize(entry.target), Path(args.db), args.trials)
        tasks = out.get("tasks") or []
        print(
            f"{entry.name}: {len(tasks)} task(s), {out.get('records')} record(s), "
            f"{len(out.get('tasks_without_valid_record') or [])} without a valid schedule, "
            f"{out.get('seconds', 0):.0f} s -> {args.db}"
        )
    return EXIT_OK
