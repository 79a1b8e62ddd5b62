"""guard's command line: thin. Parses arguments, calls one command, sets the exit code.

``guard run`` and ``guard tune`` are parsed here; every other command lives in a
``cli_<topic>.py`` whose ``register(subparsers)`` ``build_parser`` calls (cli_artefacts:
golden, manifest, zoo, partition; cli_track: track, dashboard; cli_compare, cli_calibrate,
cli_scale, cli_doctor), and cli_help adds every command's description and examples. A
command's own modules are imported inside its ``cmd_*`` function, when it runs: parsing
(``--help``, a bad flag) never builds the compiler, the backends or the tracking client.

Every error a user can cause prints one line (``guard: error: ...``) and exits with the
documented code: 2 for a suite, model, path or server that cannot be used, 3 for guard's
own failures (run with GUARD_DEBUG=1 for the traceback).
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

from guard import __version__
from guard.core.errors import (
    EXIT_BAD_INPUT,
    EXIT_INTERNAL,
    EXIT_OK,
    GuardError,
    UsageError,
)

DEFAULT_SUITE = "default.yaml"


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


def _cmd_run(args: argparse.Namespace) -> int:
    from guard.run.runner import RunOptions, run_suite

    suite = Path(args.suite) if args.suite else default_suite()
    baseline = None
    if args.baseline:
        from guard.core.results_file import load_results

        baseline = load_results(args.baseline)
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
    )
    _, code = run_suite(suite, opts)
    return code


def _cmd_tune(args: argparse.Namespace) -> int:
    from guard.backends.tvm_tuning import tune
    from guard.manifest import canonicalize
    from guard.run.case import prepare_model
    from guard.suite import load_suite

    if args.trials < 1:
        raise UsageError(f"--trials must be >= 1, got {args.trials}")
    suite = load_suite(args.suite)
    # --db names a MetaSchedule database: without --backend it means tvm, as it always did.
    if (args.backend or ("tvm" if args.db else "bundled")) == "bundled":
        from guard.cli.tune import tune_bundled

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


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="guard",
        description="guard: a regression guard for ML deployment stacks. Builds, "
        "measures, checks and logs a suite of models; exit 0 pass, 1 a check failed, 2 bad "
        "input, 3 guard failed.",
    )
    p.add_argument("--version", action="version", version=f"guard {__version__}")
    sub = p.add_subparsers(dest="command", metavar="COMMAND")

    r = sub.add_parser(
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
        "--golden-dir", metavar="DIR", help="golden store (default: <suite dir>/goldens/<suite>)"
    )
    r.add_argument("--model", action="append", metavar="NAME", help="only this model (repeatable)")
    r.add_argument(
        "--backend", action="append", metavar="NAME", help="only this backend (repeatable)"
    )
    r.set_defaults(func=_cmd_run)

    tu = sub.add_parser(
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
    tu.set_defaults(func=_cmd_tune)

    from guard.cli import artefacts as cli_artefacts

    cli_artefacts.register(sub)
    from guard.cli import track as cli_track

    cli_track.register(sub)
    from guard.cli import compare as cli_compare

    cli_compare.register(sub)
    from guard.cli import calibrate as cli_calibrate

    cli_calibrate.register(sub)
    from guard.cli import scale as cli_scale

    cli_scale.register(sub)
    from guard.cli import doctor as cli_doctor

    cli_doctor.register(sub)
    from guard.cli import help as cli_help

    cli_help.document(p)
    return p


def main(argv: list[str] | None = None) -> int:
    os.environ.setdefault("MLFLOW_DISABLE_TELEMETRY", "true")
    parser = build_parser()
    args = parser.parse_args(argv)
    if not getattr(args, "func", None):
        parser.print_help()
        return EXIT_BAD_INPUT
    try:
        return int(args.func(args))
    except GuardError as exc:
        print(f"guard: error: {exc}", file=sys.stderr)
        return exc.exit_code
    except KeyboardInterrupt:
        print("guard: interrupted", file=sys.stderr)
        return 130
    except Exception as exc:  # noqa: BLE001 - the last line of defence: one line, exit 3
        if os.environ.get("GUARD_DEBUG"):
            raise
        print(
            f"guard: internal error: {type(exc).__name__}: {exc} (set GUARD_DEBUG=1 for the "
            "traceback, and please report it)",
            file=sys.stderr,
        )
        return EXIT_INTERNAL


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
