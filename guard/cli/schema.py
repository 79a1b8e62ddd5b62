"""``guard schema suite``: the suite file's JSON Schema, for editors and validators."""

from __future__ import annotations

import argparse
import json
import sys

from guard.core.errors import EXIT_OK


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    s = subparsers.add_parser(
        "schema",
        help="print a file format's JSON Schema (guard schema suite > suite.schema.json)",
    )
    ssub = s.add_subparsers(dest="schema_command", metavar="FORMAT", required=True)
    suite = ssub.add_parser("suite", help="the suite file's JSON Schema (draft 2020-12)")
    suite.set_defaults(func=cmd_schema_suite)


def cmd_schema_suite(args: argparse.Namespace) -> int:
    from guard.suite.schema import suite_schema

    sys.stdout.write(json.dumps(suite_schema(), indent=2, sort_keys=True) + "\n")
    return EXIT_OK
