"""``guard zoo list``: the built-in models."""

from __future__ import annotations

import argparse

from guard.core.errors import EXIT_OK


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    z = subparsers.add_parser("zoo", help="the built-in models")
    zsub = z.add_subparsers(dest="zoo_command", metavar="ACTION", required=True)
    zl = zsub.add_parser("list", help="list zoo models")
    zl.set_defaults(func=cmd_zoo_list)


def cmd_zoo_list(args: argparse.Namespace) -> int:
    from guard import zoo

    for name in zoo.list_models():
        d = zoo.describe(name)
        print(f"zoo:{name:24s} {d.get('description', '')}")
    return EXIT_OK
