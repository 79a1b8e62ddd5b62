"""``guard manifest diff``: what differs between two manifests, pins first."""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from guard.core.errors import EXIT_CHECK_FAILED, EXIT_OK


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    m = subparsers.add_parser("manifest", help="inspect manifests")
    msub = m.add_subparsers(dest="manifest_command", metavar="ACTION", required=True)
    md = msub.add_parser("diff", help="what differs between two manifests, pins first")
    md.add_argument("a")
    md.add_argument("b")
    md.add_argument("--json", action="store_true")
    md.set_defaults(func=cmd_manifest_diff)


def cmd_manifest_diff(args: argparse.Namespace) -> int:
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
