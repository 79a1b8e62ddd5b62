"""``guard quantize MODEL --calibration DATA --out OUT.onnx``: profile-guided int8 (QDQ)."""

from __future__ import annotations

import argparse
import sys
from typing import Any

TOP = 10


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = subparsers.add_parser(
        "quantize",
        help="profile-guided int8: calibrate an fp32 model, write a QDQ ONNX model",
    )
    p.add_argument("model", help="an .onnx file or zoo:NAME (the fp32 source)")
    p.add_argument(
        "--calibration",
        required=True,
        metavar="DATA",
        help="an .npz (arrays named after the inputs), a directory of .npy/.npz, an ONNX "
        "test_data_set_N directory (or one holding several), or a suite file (its model's "
        "seeded inputs, --samples of them)",
    )
    p.add_argument("--out", required=True, metavar="OUT.onnx", help="where the QDQ model goes")
    p.add_argument(
        "--method",
        choices=("minmax", "percentile", "entropy"),
        default="percentile",
        help="activation ranges: observed min/max, the 99.99th percentile (default), or "
        "TensorRT's KL entropy",
    )
    p.add_argument("--percentile", type=float, default=99.99, help="for --method percentile")
    p.add_argument(
        "--per-tensor", action="store_true", help="one scale per weight (default: per channel)"
    )
    p.add_argument(
        "--symmetric", action="store_true", help="s8 activations with zero point 0 (default u8)"
    )
    p.add_argument(
        "--keep-fp32",
        action="append",
        default=[],
        metavar="OP_OR_NODE",
        help="leave this op type, node name or output tensor in fp32 (repeatable)",
    )
    p.add_argument(
        "--profile",
        metavar="PATH",
        help="save the profile here, and reuse it when it was made from this model and data",
    )
    p.add_argument("--model-name", metavar="NAME", help="the model of a suite --calibration")
    p.add_argument(
        "--samples", type=int, default=32, help="seeded samples from a suite (default 32)"
    )
    p.add_argument(
        "--report-samples",
        type=int,
        default=16,
        help="samples for the per-tensor error report (default 16; 0: no report)",
    )
    p.add_argument("--json", metavar="PATH", help="also write the summary and report as JSON")
    p.set_defaults(func=cmd_quantize)


def _suite_calibration(suite: Any, name: str | None, n: int) -> tuple[Any, Any]:
    from guard.core.errors import UsageError
    from guard.quantize.calibration import seeded_samples
    from guard.run.case import prepare_model
    from guard.suite import load_suite

    s = load_suite(suite)
    entries = [e for e in s.models if name is None or e.name == name]
    if not entries or (name is None and len({e.name for e in entries}) > 1):
        raise UsageError(
            "name the suite's model with --model-name"
            + (f" ({name!r} is not one)" if name else ""),
            where=str(suite),
            hint=f"Its models: {', '.join(sorted({e.name for e in s.models}))}.",
        )
    spec, _ = prepare_model(entries[0])
    return seeded_samples(spec, dict(entries[0].inputs), n, f"{suite}:{entries[0].name}"), spec


def cmd_quantize(args: argparse.Namespace) -> int:
    import json
    from pathlib import Path

    from guard.core.errors import EXIT_OK, UsageError
    from guard.core.fsutil import file_sha256
    from guard.quantize import QuantOptions, quantize_model, read_calibration
    from guard.suite.model import graph_inputs, load_model

    if args.model.startswith("zoo:"):
        from guard import zoo

        model_path = zoo.model_path(args.model[4:])
    else:
        model_path = Path(args.model)
        if not model_path.is_file():
            raise UsageError("model file not found", where=args.model)
    cal_path = Path(args.calibration)
    if cal_path.suffix in (".yaml", ".yml"):
        calibration, _ = _suite_calibration(cal_path, args.model_name, args.samples)
    else:
        inputs = graph_inputs(load_model(model_path), str(model_path))
        calibration = read_calibration(cal_path, inputs)
    opts = QuantOptions(
        method=args.method,
        per_channel=not args.per_tensor,
        symmetric=args.symmetric,
        keep_fp32=tuple(args.keep_fp32),
        percentile=args.percentile,
    )
    if not 50.0 < opts.percentile <= 100.0:
        raise UsageError(f"--percentile {opts.percentile:g} is outside (50, 100]")
    q = quantize_model(
        model_path,
        calibration,
        opts,
        source_sha256=file_sha256(model_path),
        profile_path=Path(args.profile) if args.profile else None,
        report_samples=max(0, args.report_samples),
    )
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    import onnx

    onnx.save(q.model, str(out))
    for line in q.warnings:
        print(f"guard: warning: {line}", file=sys.stderr)
    for line in q.notes:
        print(line)
    print(
        f"{out}: {len(q.plan.activations)} activations ({'s8' if opts.symmetric else 'u8'}, "
        f"{opts.method}), {len(q.plan.weights)} weights "
        f"({'per channel' if opts.per_channel else 'per tensor'}), "
        f"{len(q.plan.kept)} kept fp32; {len(calibration.samples)} samples"
    )
    print(
        f"source sha256 {q.source_sha256}\nprofile sha256 {q.profile_sha256}\n"
        f"calibration sha256 {calibration.sha256}"
    )
    if q.errors:
        if q.output_sqnr_db is not None:
            print(
                f"output SQNR {q.output_sqnr_db:.1f} dB (on {min(len(calibration.samples), args.report_samples)} calibration samples)"
            )
        print("worst tensors (SQNR against fp32, dB):")
        for e in q.worst[:TOP]:
            print(f"  {e.sqnr_db:7.1f}  {e.tensor}  (node {e.node})")
    if args.json:
        doc = {
            "out": str(out),
            "source_sha256": q.source_sha256,
            "profile_sha256": q.profile_sha256,
            "calibration_sha256": calibration.sha256,
            "method": opts.method,
            "samples": len(calibration.samples),
            "sqnr_db": None if q.output_sqnr_db is None else round(q.output_sqnr_db, 2),
            "worst_tensors": [e.to_json() for e in q.worst],
            "kept_fp32": [{"what": k, "why": why} for k, why in q.plan.kept],
            "warnings": q.warnings,
        }
        Path(args.json).write_text(json.dumps(doc, indent=2) + "\n")
    return EXIT_OK
