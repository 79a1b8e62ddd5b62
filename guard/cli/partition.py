"""``guard partition``: how a model's graph is split into partitions."""

from __future__ import annotations

import argparse
import json

from guard.cli.model_args import add_model_args, bound_by_flag, input_shapes, model_file
from guard.core.errors import EXIT_OK


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    pa = subparsers.add_parser(
        "partition",
        help="how a model partitions on the bundled compiler's backends or a delegate profile",
    )
    add_model_args(pa)
    pa.add_argument("--profile", help="delegate profile name or YAML file")
    pa.add_argument("--json", action="store_true")
    pa.set_defaults(func=cmd_partition)


def cmd_partition(args: argparse.Namespace) -> int:
    from guard.compiler.partition.plan import partition_report

    shapes = input_shapes(args.input)
    model = model_file(args.model)
    from guard.core.isolate import run_isolated

    # The importer runs onnx's C++ shape inference on the user's file: a crash there is one
    # error line naming the model and the signal, not a core dump.
    with bound_by_flag(args.model):
        report, text = run_isolated(
            partition_report, model, shapes or None, args.profile, what=f"partitioning {model}"
        )
    print(json.dumps(report, indent=2, default=str) if args.json else text)
    return EXIT_OK
