"""CLI for benchmark noise: ``guard calibrate``, and where compare and ab find the noise.

guard/cli/main.py calls ``register(subparsers)``; ``noise_for`` is the lookup ``guard compare``
and ``guard ab`` share (a --noise file, the suite's local noise file, or MLflow).
"""

from __future__ import annotations

import argparse
import os
from pathlib import Path


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Add calibrate to guard's subcommands."""
    k = subparsers.add_parser(
        "calibrate",
        help="noise of each artefact (A/A, and run to run); thresholds and compare follow it",
        description="Runs interleaved A/A comparisons of every (model, backend) against itself "
        "(--rounds), and the whole suite --runs times as guard run measures it, and stores "
        "the per-benchmark noise locally (.guard/noise/<suite>.json) and in MLflow: the A/A "
        "noise raises a row's threshold; the run noise (how far a whole run's level wanders "
        "beyond its rounds) widens guard compare's test for that row.",
    )
    k.add_argument("suite", type=Path)
    k.add_argument("--rounds", type=int, default=20, help="A/A comparisons per case (0: none)")
    k.add_argument(
        "--runs",
        type=int,
        default=5,
        help="whole runs of the suite for the run noise (default %(default)s; 0: none)",
    )
    k.add_argument("--round-s", type=float, default=1.0, help="seconds per A/A comparison")
    k.add_argument("--out", type=Path, help="noise file (default .guard/noise/<suite>.json)")
    k.add_argument("--no-track", action="store_true", help="do not log to MLflow")
    k.add_argument(
        "--tracking-uri",
        help="MLflow URI (default: MLFLOW_TRACKING_URI, else the local .guard store)",
    )
    k.set_defaults(func=cmd_calibrate)


def cmd_calibrate(args: argparse.Namespace) -> int:
    from guard.prepare.calibrate import calibrate_suite

    doc, path = calibrate_suite(
        args.suite,
        rounds=args.rounds,
        round_s=args.round_s,
        runs=args.runs,
        out=args.out,
        track=not args.no_track,
        tracking_uri=args.tracking_uri,
    )
    for key, e in doc["entries"].items():
        parts = []
        if "noise_pct" in e:
            parts.append(
                f"noise {e['noise_pct']:.2f}% (A/A p99 |ratio-1| over {e['rounds']} rounds)"
            )
        if "run_noise_pct" in e:
            parts.append(
                f"run noise {e['run_noise_pct']:.2f}% (SD beyond rounds, {e['runs']} runs)"
            )
        print(f"{key}: {'; '.join(parts)}")
    print(f"wrote {path}")
    return 0


def noise_for(
    args: argparse.Namespace, suite: str | None, kind: str = "sequential"
) -> dict[str, float] | None:
    """Calibrated noise: --noise, else .guard/noise/<suite>.json, else the newest
    calibration run in MLflow when a tracking URI was given (flag or environment)."""
    from guard.stats.calibrate import default_noise_path, latest_noise, load_noise

    if args.noise is not None:
        return load_noise(args.noise, kind)
    if not suite:
        return None
    local = default_noise_path(Path.cwd(), suite)
    if local.is_file():
        return load_noise(local, kind)
    uri = getattr(args, "tracking_uri", None) or os.environ.get("MLFLOW_TRACKING_URI")
    return latest_noise(uri, suite, kind) if uri else None
