"""``guard reduce``: shrink a failing model to the nodes that keep it failing."""

from __future__ import annotations

import argparse
from pathlib import Path


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    r = subparsers.add_parser(
        "reduce",
        help="shrink a model to the smallest connected subgraph that still fails",
        description="guard reduce MODEL --suite S --model M (--accuracy | --latency BASE | "
        "--partitions). Delta debugging over connected subgraphs: a cut's inputs become model "
        "inputs fed from the full model's recorded intermediate tensors. --accuracy keeps "
        "subgraphs whose outputs on the suite's backend still fail the model's tolerance "
        "against the golden-producing reference; --latency keeps those whose interleaved "
        "head/base ratio still regresses (BASE: a suite variant built the base's way, or "
        "another backend); "
        "--partitions keeps those that still split on the same declined op. Writes a bundle "
        "(reduced .onnx, inputs.npz, a one-model suite with its golden, README.md). Exit 0 "
        "with a bundle; 1 when the full model does not show the problem (nothing written).",
    )
    r.add_argument(
        "model_file",
        metavar="MODEL",
        help="the .onnx file or zoo:<name> (default: the suite entry's source)",
        nargs="?",
    )
    r.add_argument("--suite", required=True, type=Path, help="the suite the model runs in")
    r.add_argument(
        "--model",
        required=True,
        help="the suite's model entry (its inputs, options and checks apply)",
    )
    r.add_argument(
        "--backend",
        help="the backend that fails (default: bundled when the model "
        "runs on it, else its only backend)",
    )
    mode = r.add_mutually_exclusive_group(required=True)
    mode.add_argument("--accuracy", action="store_true", help="keep outputs outside tolerance")
    mode.add_argument(
        "--latency",
        metavar="BASE",
        help="keep a regressed interleaved head/base ratio; BASE is a suite variant file "
        "(the same backend built another way) or a backend name (the backend pair)",
    )
    mode.add_argument(
        "--partitions", action="store_true", help="keep a split caused by the same declined op"
    )
    r.add_argument(
        "--out",
        type=Path,
        default=None,
        help="bundle directory (default: reduce-<model>-<backend>; must not exist or be empty)",
    )
    r.add_argument(
        "--regress-pct",
        type=float,
        default=None,
        help="latency threshold in %% (default: the model's checks.latency.regress_pct, else 5)",
    )
    r.add_argument(
        "--budget-s",
        type=float,
        default=4.0,
        help="interleaved measurement seconds per tested subgraph (default %(default)s)",
    )
    r.add_argument(
        "--max-tests",
        type=int,
        default=400,
        help="give up after this many subgraph tests (default %(default)s)",
    )
    r.add_argument("--json", type=Path, metavar="PATH", help="write the reduction summary")
    r.set_defaults(func=cmd_reduce)


def cmd_reduce(args: argparse.Namespace) -> int:
    from guard.reduce import reduce_command

    return reduce_command(args)
