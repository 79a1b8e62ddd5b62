"""``guard track push``: send a results file kept locally to a tracking server."""

from __future__ import annotations

import argparse
from pathlib import Path

from guard.core.errors import EXIT_OK


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    t = subparsers.add_parser("track", help="MLflow tracking")
    tsub = t.add_subparsers(dest="track_command", metavar="ACTION", required=True)
    tp = tsub.add_parser("push", help="send a results file kept locally to a tracking server")
    tp.add_argument("path")
    tp.add_argument("--tracking-uri", metavar="URI")
    tp.set_defaults(func=cmd_track_push)


def cmd_track_push(args: argparse.Namespace) -> int:
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
