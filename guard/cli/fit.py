"""``guard fit``: the memory-budget ladder for one model (exit 0 fits, 1 does not)."""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

from guard.cli.model_args import add_model_args, bound_by_flag, input_shapes, model_file
from guard.core.errors import EXIT_CHECK_FAILED, EXIT_OK, UsageError


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    fp = subparsers.add_parser(
        "fit",
        help="climb the memory ladder (views, schedule, recompute, tile, int8, spill) until the "
        "bundled compiler's arena fits a budget",
    )
    add_model_args(fp)
    fp.add_argument("--budget", required=True, metavar="B",
                    help="bytes or a size: B, KiB, MiB, GiB, kB, MB (e.g. 2MiB)")  # fmt: skip
    fp.add_argument("--no-latency", action="store_true",
                    help="skip building and timing each rung (arena only)")  # fmt: skip
    fp.add_argument(
        "--calibration",
        metavar="DATA",
        help="calibration data for the int8 rung (an .npz, a directory of .npy/.npz or "
        "test_data_set_N; as guard quantize takes it); default: 8 seeded inputs",
    )
    fp.add_argument(
        "--within",
        type=float,
        default=60.0,
        metavar="S",
        help="time bound in seconds (default 60): a rung whose build would end past it is "
        "not built or timed (said); 0: no bound",
    )
    fp.add_argument("--json", action="store_true")
    fp.set_defaults(func=cmd_fit)


def cmd_fit(args: argparse.Namespace) -> int:
    from guard.core.budget_bytes import parse_budget

    budget = parse_budget(args.budget, "--budget")
    if args.within < 0:
        raise UsageError(f"--within {args.within:g}: expected seconds >= 0 (0: no bound)")
    shapes = input_shapes(args.input)
    shown = args.model
    model = model_file(shown)
    calibration = Path(args.calibration) if args.calibration else None
    if calibration is not None and not calibration.exists():
        raise UsageError(
            f"--calibration {args.calibration}: no such file or directory",
            hint="Give an .npz, a directory of .npy/.npz, or an ONNX test_data_set_N.",
        )
    from guard.compiler.fit.report import fit_model
    from guard.core.isolate import run_isolated

    with bound_by_flag(shown):
        report, text = run_isolated(
            fit_model, model, shapes or None, budget, latency=not args.no_latency, name=shown,
            quantise=quantiser(model, shapes, calibration), within_s=args.within or None,
            what=f"fitting {model}",
        )  # fmt: skip
    print(json.dumps(report, indent=2, default=str) if args.json else text)
    return EXIT_OK if report["fits"] else EXIT_CHECK_FAILED


def quantiser(model: Path, shapes: dict[str, tuple[int, ...]], calibration: Path | None) -> Any:
    """The int8 rung's hook (guard.quantize.fit_hook) for ``model`` with the host's layouts
    (inputs not in ``shapes`` keep the model's own dims)."""
    from guard.compiler.codegen.llvm_target import codegen_target
    from guard.quantize.fit_hook import quantise_hook

    return quantise_hook(model, shapes, table=codegen_target("host").table, calibration=calibration)
