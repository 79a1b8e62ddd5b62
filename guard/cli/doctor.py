"""``guard doctor``: why a result changed, step by step."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from guard.core.errors import UsageError


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
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
