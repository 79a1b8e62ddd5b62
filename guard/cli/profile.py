"""``guard profile RESULT``: the top nodes or kernels by time of each result."""

from __future__ import annotations

import argparse
import sys

from guard.cli.options import tracking_arg
from guard.core.errors import EXIT_OK, UsageError


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = subparsers.add_parser(
        "profile", help="top nodes (onnxruntime profiler) or kernels (bundled) by time"
    )
    p.add_argument("result", help="a results file (guard run --json) or run:<id>")
    p.add_argument("--model", action="append", metavar="NAME", help="only this model")
    p.add_argument("--backend", action="append", metavar="NAME", help="only this backend")
    p.add_argument("--top", type=int, default=10, help="rows per result (default %(default)s)")
    p.add_argument(
        "--chart", metavar="SVG", help="also write the first result's bar chart (SVG) here"
    )
    tracking_arg(p)
    p.set_defaults(func=cmd_profile)


def cmd_profile(args: argparse.Namespace) -> int:
    from pathlib import Path

    from guard.compare.baseline import is_mlflow_spec, load_side
    from guard.report.profile import profile_text, profiled
    from guard.track.profile_chart import profile_svg

    uri = None
    if is_mlflow_spec(args.result):
        from guard.track import resolve_uri

        uri = resolve_uri(args.tracking_uri, Path.cwd())
    doc = load_side(args.result, uri=uri)
    results = [
        r
        for r in profiled(doc)
        if (not args.model or r.model in args.model)
        and (not args.backend or r.backend in args.backend)
    ]
    if not results:
        raise UsageError(
            "no result here carries a per-node profile"
            + (" (for the --model/--backend asked)" if args.model or args.backend else ""),
            where=args.result,
            hint="guard run records one for onnxruntime (its profiler) and bundled (its "
            "kernels) results; re-run with this guard.",
        )
    sys.stdout.write(profile_text(results, max(1, args.top)))
    if args.chart:
        Path(args.chart).write_text(profile_svg(results[0], max(1, args.top)))
        print(f"bar chart: {args.chart}")
    return EXIT_OK
