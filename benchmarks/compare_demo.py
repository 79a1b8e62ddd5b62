"""`guard compare` end to end on real runs: exit 0 on an A/A pair, 1 when HEAD is slower.

Builds the benchmark MLP (benchmarks/regress_power.py) and a copy carrying the extra
branch calibrated to ``--slowdown`` of the measured median (outputs unchanged), writes a
one-model suite for each, runs ``guard run --json`` (real pipeline, real onnxruntime
session, separate processes) three times per trial in ABA order: base, slow, base again.
Then ``guard compare base1 base2`` (A/A) and ``guard compare base1 slow``.

    .venv/bin/python benchmarks/compare_demo.py --trials 10 --slowdown 0.10
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from regress_power import build_model, calibrate_branch  # noqa: E402

SUITE = """schema_version: 1
suite: {suite}
defaults:
  backends: [onnxruntime]
  target: host
  threads: 1
  measure: {{warmup_s: 0.3, min_iters: 50, min_time_s: {seconds}, max_time_s: 20}}
models:
  - name: mlp
    source: {model}
    inputs:
      x: {{shape: [16, 512], dist: normal, seed: 0}}
"""


def guard(*args: str, cwd: Path) -> int:
    cmd = [sys.executable, "-m", "guard.cli.main", *args]
    return subprocess.run(cmd, cwd=cwd, capture_output=True, text=True).returncode


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("--trials", type=int, default=5)
    ap.add_argument("--slowdown", type=float, default=0.10)
    ap.add_argument("--seconds", type=float, default=2.0, help="min_time_s per run")
    ap.add_argument("--workdir", type=Path, default=Path("/tmp/guard-compare-demo"))
    ap.add_argument("--out", type=Path, default=Path("benchmarks/results/compare_demo.json"))
    args = ap.parse_args(argv)

    wd = args.workdir
    wd.mkdir(parents=True, exist_ok=True)
    cols, measured = calibrate_branch(args.slowdown)
    (wd / "base.onnx").write_bytes(build_model())
    (wd / "slow.onnx").write_bytes(build_model(cols))
    # One suite name (guard compare compares runs of one suite), in two directories so
    # that each variant keeps its own golden.
    for name, model in (("base", "../base.onnx"), ("slow", "../slow.onnx")):
        (wd / name).mkdir(exist_ok=True)
        (wd / name / f"{name}.yaml").write_text(
            SUITE.format(suite="demo", model=model, seconds=args.seconds)
        )
    print(f"slow branch: width {cols}, measured ratio {measured:.4f}", flush=True)

    trials = []
    for i in range(args.trials):
        t0 = time.time()
        runs = {}
        for tag, suite in (("a1", "base"), ("s", "slow"), ("a2", "base")):
            code = guard(
                "run", f"{suite}/{suite}.yaml", "--json", f"{tag}-{i}.json", "--no-track", cwd=wd
            )
            if code not in (0, 1):
                sys.exit(f"guard run {suite}.yaml exited {code}")
            runs[tag] = f"{tag}-{i}.json"
        aa = guard(
            "compare", runs["a1"], runs["a2"], "--quiet", "--json", f"aa-{i}.cmp.json", cwd=wd
        )
        ab = guard(
            "compare", runs["a1"], runs["s"], "--quiet", "--json", f"slow-{i}.cmp.json", cwd=wd
        )
        rows = {
            k: json.loads((wd / f"{k}-{i}.cmp.json").read_text())["rows"][0] for k in ("aa", "slow")
        }
        trial = {
            "aa_exit": aa,
            "slow_exit": ab,
            "aa_ratio": rows["aa"]["ratio"],
            "slow_ratio": rows["slow"]["ratio"],
            "aa_verdict": rows["aa"]["verdict"],
            "slow_verdict": rows["slow"]["verdict"],
            "contention": rows["slow"].get("contention"),
            "wall_s": time.time() - t0,
        }
        trials.append(trial)
        print(json.dumps(trial), flush=True)
    summary = {
        "command": " ".join(sys.argv),
        "slowdown_target": args.slowdown,
        "slowdown_measured": measured,
        "aa_exit_0": sum(t["aa_exit"] == 0 for t in trials),
        "slow_exit_1": sum(t["slow_exit"] == 1 for t in trials),
        "trials": trials,
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(summary, indent=2) + "\n")
    print(f"A/A exit 0: {summary['aa_exit_0']}/{len(trials)}; slower HEAD exit 1: "
          f"{summary['slow_exit_1']}/{len(trials)}")  # fmt: skip
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
