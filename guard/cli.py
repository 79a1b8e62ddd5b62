"""guard's command line: thin. Parses arguments, calls guard.run, sets the exit code.

Every error a user can cause prints one line (``guard: error: ...``) and exits with the
documented code: 2 for a suite, model, path or server that cannot be used, 3 for guard's
own failures (run with GUARD_DEBUG=1 for the traceback).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path

from guard import __version__
from guard.errors import (
    EXIT_BAD_INPUT,
    EXIT_CHECK_FAILED,
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
    shipped = Path(__file__).resolve().parent / "suites" / DEFAULT_SUITE
    if shipped.is_file():
        return shipped
    raise UsageError(
        "no suite given and no suites/default.yaml here",
        hint="Pass a suite file: guard run path/to/suite.yaml.",
    )


def _cmd_run(args: argparse.Namespace) -> int:
    from guard.run import RunOptions, run_suite

    suite = Path(args.suite) if args.suite else default_suite()
    baseline = None
    if args.baseline:
        from guard.compare.compare import load_results

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


def _cmd_golden_update(args: argparse.Namespace) -> int:
    from guard.case import prepare_model
    from guard.golden.produce import ensure_golden, golden_store
    from guard.suite import load_suite

    if not args.reason or not args.reason.strip():
        raise UsageError(
            "--reason must say why the golden changes",
            hint="e.g. --reason 'onnxruntime 1.32 changed GELU fusion'.",
        )
    suite = load_suite(args.suite)
    store = golden_store(suite, Path(args.golden_dir) if args.golden_dir else None)
    names = {m.name for m in suite.models}
    for m in args.model or ():
        if m not in names:
            raise UsageError(
                f"--model {m!r}: no such model in suite {suite.name}",
                hint=f"Models: {', '.join(sorted(names))}.",
            )
    for entry in suite.models:
        if args.model and entry.name not in args.model:
            continue
        old, _ = store.load_replaceable(entry.name)
        spec, path = prepare_model(entry)
        golden, status = ensure_golden(store, entry, spec, path, update_reason=args.reason)
        if (
            old is not None
            and golden.sha256 == old.sha256
            and golden.meta.get("updated") == old.meta.get("updated")
        ):
            print(
                f"{entry.name}: golden unchanged {old.sha256[:12]} (same model, inputs and "
                "outputs: nothing written)"
            )
            continue
        old_sha = old.sha256[:12] if old else "none"
        print(f"{entry.name}: golden {status} {old_sha} -> {golden.sha256[:12]} ({args.reason})")
    return EXIT_OK


def _cmd_manifest_diff(args: argparse.Namespace) -> int:
    from guard.manifest import load_manifest
    from guard.manifest.diff import diff_manifests, format_diff
    from guard.manifest.pins import is_pinned

    a, b = load_manifest(Path(args.a)), load_manifest(Path(args.b))
    d = diff_manifests(a, b)
    if args.json:
        print(json.dumps(d, indent=2, sort_keys=True, default=str))
    else:
        print(format_diff(d))
    # diff(1)'s convention: 1 when they differ where it matters (a pin: not comparable).
    return EXIT_CHECK_FAILED if any(is_pinned(f) for f in d) else EXIT_OK


def _cmd_track_push(args: argparse.Namespace) -> int:
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


def _cmd_tune(args: argparse.Namespace) -> int:
    from guard.backends.tvm_tuning import tune
    from guard.case import prepare_model
    from guard.manifest import canonicalize
    from guard.suite import load_suite

    if args.trials < 1:
        raise UsageError(f"--trials must be >= 1, got {args.trials}")
    suite = load_suite(args.suite)
    # --db names a MetaSchedule database: without --backend it means tvm, as it always did.
    if (args.backend or ("tvm" if args.db else "bundled")) == "bundled":
        from guard.cli_tune import tune_bundled

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


def _cmd_dashboard(args: argparse.Namespace) -> int:
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


def _cmd_zoo_list(args: argparse.Namespace) -> int:
    from guard import zoo

    for name in zoo.list_models():
        d = zoo.describe(name)
        print(f"zoo:{name:24s} {d.get('description', '')}")
    return EXIT_OK


def _cmd_partition(args: argparse.Namespace) -> int:
    from guard.compiler.plan import partition_report

    shapes = {}
    for item in args.input or ():
        name, _, dims = item.partition("=")
        try:
            shapes[name] = tuple(int(d) for d in dims.split(",") if d)
        except ValueError:
            raise UsageError(f"--input {item!r}: expected NAME=D0,D1,...") from None
    model = args.model
    if model.startswith("zoo:"):
        from guard import zoo

        model = zoo.model_path(model[4:])
    from guard.isolate import run_isolated

    # The importer runs onnx's C++ shape inference on the user's file: a crash there is one
    # error line naming the model and the signal, not a core dump.
    report, text = run_isolated(
        partition_report, Path(model), shapes or None, args.profile, what=f"partitioning {model}"
    )
    print(json.dumps(report, indent=2, default=str) if args.json else text)
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

    g = sub.add_parser("golden", help="manage goldens")
    gsub = g.add_subparsers(dest="golden_command", metavar="ACTION", required=True)
    gu = gsub.add_parser("update", help="re-create goldens with the reference, recording why")
    gu.add_argument("suite")
    gu.add_argument("--reason", required=True, help="why the golden changes (recorded)")
    gu.add_argument("--model", action="append", metavar="NAME", help="only this model")
    gu.add_argument("--golden-dir", metavar="DIR")
    gu.set_defaults(func=_cmd_golden_update)

    m = sub.add_parser("manifest", help="inspect manifests")
    msub = m.add_subparsers(dest="manifest_command", metavar="ACTION", required=True)
    md = msub.add_parser("diff", help="what differs between two manifests, pins first")
    md.add_argument("a")
    md.add_argument("b")
    md.add_argument("--json", action="store_true")
    md.set_defaults(func=_cmd_manifest_diff)

    t = sub.add_parser("track", help="MLflow tracking")
    tsub = t.add_subparsers(dest="track_command", metavar="ACTION", required=True)
    tp = tsub.add_parser("push", help="send a results file kept locally to a tracking server")
    tp.add_argument("path")
    tp.add_argument("--tracking-uri", metavar="URI")
    tp.set_defaults(func=_cmd_track_push)

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

    db = sub.add_parser(
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
    db.set_defaults(func=_cmd_dashboard)

    z = sub.add_parser("zoo", help="the built-in models")
    zsub = z.add_subparsers(dest="zoo_command", metavar="ACTION", required=True)
    zl = zsub.add_parser("list", help="list zoo models")
    zl.set_defaults(func=_cmd_zoo_list)

    pa = sub.add_parser(
        "partition",
        help="how a model partitions on the bundled compiler's backends or a delegate profile",
    )
    pa.add_argument("model", help="an .onnx file or zoo:<name>")
    pa.add_argument("--profile", help="delegate profile name or YAML file")
    pa.add_argument(
        "--input", action="append", metavar="NAME=D0,D1,..", help="bind an input's shape"
    )
    pa.add_argument("--json", action="store_true")
    pa.set_defaults(func=_cmd_partition)

    from guard import cli_compare

    cli_compare.register(sub)
    from guard import cli_calibrate

    cli_calibrate.register(sub)
    from guard import cli_scale

    cli_scale.register(sub)
    from guard import cli_doctor

    cli_doctor.register(sub)
    from guard import cli_help

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
