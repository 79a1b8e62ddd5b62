"""``guard track push``: send a results file kept locally to a tracking server."""

from __future__ import annotations

import argparse
from pathlib import Path

from guard.core.errors import EXIT_OK, UsageError


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    t = subparsers.add_parser("track", help="MLflow tracking")
    tsub = t.add_subparsers(dest="track_command", metavar="ACTION", required=True)
    tp = tsub.add_parser("push", help="send a results file kept locally to a tracking server")
    tp.add_argument("path", nargs="?", help="a results file (guard run --json, or kept)")
    tp.add_argument(
        "--pending",
        action="store_true",
        help="push every results file kept in .guard/pending/ (journalled before logging, "
        "kept when tracking failed or a kill cut it short) and remove each once logged",
    )
    tp.add_argument("--tracking-uri", metavar="URI")
    tp.set_defaults(func=cmd_track_push)


def cmd_track_push(args: argparse.Namespace) -> int:
    from guard.track import push, push_pending, resolve_uri

    if (args.path is None) == (not args.pending):
        raise UsageError("guard track push: give a results file or --pending (not both)")
    uri = resolve_uri(args.tracking_uri, Path.cwd())
    if args.pending:
        done = push_pending(Path.cwd(), uri)
        for path, receipt in done:
            verb = "already logged" if receipt.get("already_tracked") else "pushed"
            print(f"{verb} {path} to {uri}: parent run {receipt.get('parent_run_id')}")
        print(f"{len(done)} pending results file(s) delivered to {uri}")
        return EXIT_OK
    receipt = push(Path(args.path), uri)
    if receipt.get("already_tracked"):
        print(
            f"{args.path} is already logged at {uri} (parent run "
            f"{receipt.get('parent_run_id')}): nothing sent"
        )
    else:
        print(f"pushed {args.path} to {uri}: parent run {receipt.get('parent_run_id')}")
    return EXIT_OK
