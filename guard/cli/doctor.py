"""CLI for diagnosis: ``guard doctor`` (the slow-compiler checklist) and ``guard reduce``.

guard/cli/main.py calls ``register(subparsers)``; each command returns its exit code and raises
GuardError subclasses for input it cannot use.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from guard.core.errors import UsageError


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Add doctor and reduce to guard's subcommands."""
    d = subparsers.add_parser(
        "doctor",
        help="work the 'compiler made it slower' checklist on two runs (or one run's health)",
        description="guard doctor [BASE] HEAD. Each side is a results file (guard run --json), "
        "run:<id> (an MLflow invocation) or, for BASE, branch:<name>, as guard compare takes "
        "them. For every model both sides ran, the eleven steps in order, one finding each: "
        "ok, suspect, cause found, not applicable, or unknown (naming the missing field). "
        "Exit 1 when a step found a cause, 0 otherwise.",
    )
    d.add_argument("sides", nargs="+", metavar="SIDE", help="[BASE] HEAD")
    d.add_argument("--model", action="append", metavar="NAME", help="only this model (repeatable)")
    d.add_argument("--backend", action="append", metavar="NAME", help="only this backend")
    d.add_argument(
        "--json",
        type=Path,
        metavar="PATH",
        help="write the doctor document (schema_version 1; '-' for stdout)",
    )
    d.add_argument("--markdown", type=Path, metavar="PATH", help="write the Markdown report")
    d.add_argument("--quiet", action="store_true", help="do not print the console report")
    d.add_argument("--suite", help="suite name for branch: sides (default: the other side's)")
    d.add_argument(
        "--tracking-uri",
        help="MLflow URI for run:/branch: sides (default: "
        "MLFLOW_TRACKING_URI, else the local .guard store)",
    )
    d.set_defaults(func=cmd_doctor)

    r = subparsers.add_parser(
        "reduce",
        help="shrink a model to the smallest connected subgraph that still fails",
        description="guard reduce MODEL --suite S --model M (--accuracy | --latency BASE | "
        "--partitions). Delta debugging over connected subgraphs: a cut's inputs become model "
        "inputs fed from the full model's recorded intermediate tensors. --accuracy keeps "
        "subgraphs whose outputs on the suite's backend still fail the model's tolerance "
        "against the golden-producing reference; --latency keeps those whose interleaved "
        "head/base ratio still regresses (BASE: a suite variant built the base's way, or "
        "another backend); "
        "--partitions keeps those that still split on the same declined op. Writes a bundle "
        "(reduced .onnx, inputs.npz, a one-model suite with its golden, README.md). Exit 0 "
        "with a bundle; 1 when the full model does not show the problem (nothing written).",
    )
    r.add_argument(
        "model_file",
        metavar="MODEL",
        help="the .onnx file or zoo:<name> (default: the suite entry's source)",
        nargs="?",
    )
    r.add_argument("--suite", required=True, type=Path, help="the suite the model runs in")
    r.add_argument(
        "--model",
        required=True,
        help="the suite's model entry (its inputs, options and checks apply)",
    )
    r.add_argument(
        "--backend",
        help="the backend that fails (default: bundled when the model "
        "runs on it, else its only backend)",
    )
    mode = r.add_mutually_exclusive_group(required=True)
    mode.add_argument("--accuracy", action="store_true", help="keep outputs outside tolerance")
    mode.add_argument(
        "--latency",
        metavar="BASE",
        help="keep a regressed interleaved head/base ratio; BASE is a suite variant file "
        "(the same backend built another way) or a backend name (the backend pair)",
    )
    mode.add_argument(
        "--partitions", action="store_true", help="keep a split caused by the same declined op"
    )
    r.add_argument(
        "--out",
        type=Path,
        default=None,
        help="bundle directory (default: reduce-<model>-<backend>; must not exist or be empty)",
    )
    r.add_argument(
        "--regress-pct",
        type=float,
        default=None,
        help="latency threshold in %% (default: the model's checks.latency.regress_pct, else 5)",
    )
    r.add_argument(
        "--budget-s",
        type=float,
        default=4.0,
        help="interleaved measurement seconds per tested subgraph (default %(default)s)",
    )
    r.add_argument(
        "--max-tests",
        type=int,
        default=400,
        help="give up after this many subgraph tests (default %(default)s)",
    )
    r.add_argument("--json", type=Path, metavar="PATH", help="write the reduction summary")
    r.set_defaults(func=cmd_reduce)


def cmd_doctor(args: argparse.Namespace) -> int:
    from guard.compare.baseline import is_mlflow_spec, load_side
    from guard.core.fsutil import atomic_write_text
    from guard.doctor import diagnose, exit_code
    from guard.doctor.render import render_console, to_markdown

    if len(args.sides) > 2:
        raise UsageError(f"expected [BASE] HEAD, got {len(args.sides)} sides")
    head_spec = args.sides[-1]
    base_spec = args.sides[0] if len(args.sides) == 2 else None
    if head_spec.startswith(("branch:", "mlflow:")):
        raise UsageError(f"{head_spec}: HEAD must be a results file or run:<id>")
    for p in (args.json, args.markdown):
        if p is not None and str(p) != "-" and not p.resolve().parent.is_dir():
            raise UsageError(f"output directory {p.resolve().parent} does not exist", where=str(p))
    uri = None
    if is_mlflow_spec(head_spec) or (base_spec and is_mlflow_spec(base_spec)):
        from guard.track import resolve_uri

        uri = resolve_uri(args.tracking_uri, Path.cwd())
    head = load_side(head_spec, uri=uri, suite=args.suite)
    base = load_side(base_spec, uri=uri, suite=args.suite, other=head) if base_spec else None
    doc = diagnose(
        head,
        base,
        models=tuple(args.model or ()),
        backends=tuple(args.backend or ()),
        labels=(base_spec or "base", head_spec),
    )
    text = json.dumps(doc, indent=2, sort_keys=True, default=str) + "\n"
    if args.json is not None:
        if str(args.json) == "-":
            sys.stdout.write(text)
        else:
            atomic_write_text(args.json, text)
    if args.markdown is not None:
        atomic_write_text(args.markdown, to_markdown(doc))
    if not args.quiet and str(args.json) != "-":
        render_console(doc)
    return exit_code(doc)


def cmd_reduce(args: argparse.Namespace) -> int:
    from guard.reduce import reduce_command

    return reduce_command(args)
