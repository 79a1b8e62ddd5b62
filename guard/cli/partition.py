"""``guard partition``: how a model's graph is split into partitions."""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from guard.core.errors import EXIT_OK, UsageError


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    pa = subparsers.add_parser(
        "partition",
        help="how a model partitions on the bundled compiler's backends or a delegate profile",
    )
    pa.add_argument("model", help="an .onnx file or zoo:<name>")
    pa.add_argument("--profile", help="delegate profile name or YAML file")
    pa.add_argument(
        "--input", action="append", metavar="NAME=D0,D1,..", help="bind an input's shape"
    )
    pa.add_argument("--json", action="store_true")
    pa.set_defaults(func=cmd_partition)


def cmd_partition(args: argparse.Namespace) -> int:
    from guard.compiler.partition.plan import partition_report

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
    from guard.core.isolate import run_isolated

    # The importer runs onnx's C++ shape inference on the user's file: a crash there is one
    # error line naming the model and the signal, not a core dump.
    report, text = run_isolated(
        partition_report, Path(model), shapes or None, args.profile, what=f"partitioning {model}"
    )
    print(json.dumps(report, indent=2, default=str) if args.json else text)
    return EXIT_OK
