"""``guard cache``: what guard keeps in its per-user cache, and pruning it."""

from __future__ import annotations

import argparse
import re

from guard.core.errors import EXIT_OK, UsageError

_UNITS = {"": 1, "k": 2**10, "m": 2**20, "g": 2**30, "t": 2**40}


def parse_size(text: str) -> int:
    """``500M``, ``2G``, ``1.5g``, ``1000000`` -> bytes."""
    m = re.fullmatch(r"\s*([0-9]+(?:\.[0-9]+)?)\s*([kmgt]?)(?:i?b)?\s*", text.lower())
    if not m:
        raise UsageError(f"--max-size {text!r} is not a size", hint="e.g. --max-size 2G or 500M")
    return int(float(m.group(1)) * _UNITS[m.group(2)])


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    c = subparsers.add_parser(
        "cache", help="show guard's per-user cache ($GUARD_CACHE or ~/.cache/guard), or prune it"
    )
    csub = c.add_subparsers(dest="cache_command", metavar="ACTION", required=True)
    show = csub.add_parser("show", help="each part's size and entries, the oldest first")
    show.add_argument("--all", action="store_true", help="list every entry, not only totals")
    show.set_defaults(func=cmd_cache_show)
    pr = csub.add_parser("prune", help="remove entries by age and/or to fit a size")
    pr.add_argument("--older-than", type=float, metavar="DAYS", help="remove entries not "
                    "written for this many days")  # fmt: skip
    pr.add_argument("--max-size", metavar="SIZE", help="then remove the oldest entries "
                    "until the cache fits (e.g. 2G)")  # fmt: skip
    pr.add_argument("--dry-run", action="store_true", help="say what would go, remove nothing")
    pr.set_defaults(func=cmd_cache_prune)


def _gib(n: int) -> str:
    return f"{n / 2**30:.2f} GiB" if n >= 2**28 else f"{n / 2**20:.1f} MiB"


def cmd_cache_show(args: argparse.Namespace) -> int:
    from guard.core.user_cache import cache_entries, cache_root

    root = cache_root()
    entries = cache_entries(root)
    print(f"{root}: {_gib(sum(e.bytes for e in entries))} in {len(entries)} entr(ies)")
    for part in sorted({e.part for e in entries}):
        mine = [e for e in entries if e.part == part]
        print(f"  {part}/: {_gib(sum(e.bytes for e in mine))} in {len(mine)} entr(ies)")
        for e in mine if args.all else ():
            print(f"    {e.path.name}  {_gib(e.bytes)}")
    return EXIT_OK


def cmd_cache_prune(args: argparse.Namespace) -> int:
    import time

    from guard.core.user_cache import cache_entries, cache_root, prune, remove

    if args.older_than is None and args.max_size is None:
        raise UsageError("say what to prune", hint="guard cache prune --older-than 30 or "
                         "--max-size 2G (or both)")  # fmt: skip
    if args.older_than is not None and args.older_than < 0:
        raise UsageError(f"--older-than must be >= 0 days, got {args.older_than}")
    max_bytes = parse_size(args.max_size) if args.max_size is not None else None
    older = args.older_than * 86400 if args.older_than is not None else None
    root = cache_root()
    gone = prune(cache_entries(root), older_than_s=older, max_bytes=max_bytes, now=time.time())
    for e in gone:
        print(f"{'would remove' if args.dry_run else 'removing'} {e.part}/{e.path.name} "
              f"({_gib(e.bytes)})")  # fmt: skip
    freed = sum(e.bytes for e in gone) if args.dry_run else remove(gone)
    verb = "would free" if args.dry_run else "freed"
    print(f"{root}: {verb} {_gib(freed)} ({len(gone)} entr(ies))")
    return EXIT_OK
