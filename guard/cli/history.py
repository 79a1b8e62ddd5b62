"""``guard history``: change points in a model's MLflow history, and creep toward its bound."""

from __future__ import annotations

import argparse
from pathlib import Path

from guard.cli.options import tracking_arg


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    h = subparsers.add_parser(
        "history", help="change points in a model's MLflow history, and creep toward its bound"
    )
    h.add_argument("suite", help="suite file (bounds come from it) or suite name")
    h.add_argument("--model", required=True)
    h.add_argument("--backend")
    h.add_argument("--branch", default="main", help="branch (default %(default)s; '' for all)")
    h.add_argument("--metric", default="latency_ms.p50")
    h.add_argument(
        "--bound",
        type=float,
        help="the metric's bound (default for latency_ms.pNN with a suite file: its "
        "checks.latency.pNN_ms for this arch)",
    )
    h.add_argument("--penalty", type=float, help="change-point penalty (default: BIC-like)")
    h.add_argument("--json", type=Path, metavar="PATH")
    tracking_arg(h)
    h.set_defaults(func=cmd_history)


def cmd_history(args: argparse.Namespace) -> int:
    from guard.compare.history import history_command

    return history_command(args)
