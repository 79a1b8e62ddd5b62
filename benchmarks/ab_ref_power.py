"""False regressions and power of the per-commit path: `guard ab SUITE --base-ref REF`.

What the per-commit workflow runs on a pull request: the head commit against its merge
base on one runner, both sides built from their own trees in their own worker processes
and timed in alternation (guard/experiment/ab_ref.py). Here the "repository" is a temporary
git repository holding a suite of the same three onnxruntime models as
benchmarks/flow_power.py, in three commits: the base models, the +5% variants and the
+10% variants (the same injected side branch, reused from flow_power's work directory so
both benchmarks judge the same models). Every trial is one real `guard ab` invocation:

- A/A: --base-ref c0 --head-ref c0 (both workers run the same tree);
- +5%: --base-ref c0 --head-ref c5; +10%: --base-ref c0 --head-ref c10.

Each trial's row records the verdict, the paired ratio, its CI, the samples it took and
the contention during its measurement (other processes' share of the spare CPU, from
/proc/stat minus the coordinator's and both workers' CPU time).

    .venv/bin/python benchmarks/ab_ref_power.py --models-from WORK --injected FLOW.json \
        --trials 6 --out benchmarks/results/ab_ref_power.json
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from flow_power import CONDITIONS, MEASURE, MODELS, condition_list, start_cotenant, write_suite

VARIANTS = (("aa", "base"), ("slow5", "slow5"), ("slow10", "slow10"))


def git(repo: Path, *args: str) -> str:
    return subprocess.run(
        ["git", *args], cwd=repo, check=True, capture_output=True, text=True
    ).stdout.strip()


def make_repo(root: Path, models_from: Path) -> tuple[Path, dict[str, str]]:
    """A git repository whose commits hold the base, +5% and +10% models at one path."""
    repo = root / "repo"
    repo.mkdir(parents=True)
    git(repo, "init", "-q")
    git(repo, "config", "user.email", "bench@example.com")
    git(repo, "config", "user.name", "bench")
    shas = {}
    for variant in ("base", "slow5", "slow10"):
        models = {}
        for name in MODELS:
            src = models_from / (f"{name}.onnx" if variant == "base" else f"{name}-{variant}.onnx")
            shutil.copyfile(src, repo / f"{name}.onnx")
            models[name] = Path(f"{name}.onnx")
        # guard's default measure, as flow_power's suites (the budget is guard ab's own)
        write_suite(repo, models, MEASURE.format(rounds=10, min_time_s=1.0))
        git(repo, "add", ".")
        git(repo, "commit", "-qm", variant)
        shas[variant] = git(repo, "rev-parse", "HEAD")
    return repo, shas


def trial(repo: Path, base: str, head: str, out: Path, budget_s: float, cache: Path) -> dict:
    env = dict(os.environ, MLFLOW_DISABLE_TELEMETRY="true", GUARD_ENV_CACHE=str(cache))
    t0 = time.time()
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "guard.cli.main",
            "ab",
            str(repo / "suite.yaml"),
            "--base-ref",
            base,
            "--head-ref",
            head,
            "--budget-s",
            str(budget_s),
            "--json",
            str(out),
            "--quiet",
        ],
        env=env,
        capture_output=True,
        text=True,
        timeout=1800,
    )
    if proc.returncode not in (0, 1) or not out.is_file():
        sys.exit(f"guard ab exited {proc.returncode}: {proc.stderr[-2000:]}")
    doc = json.loads(out.read_text())
    rows = [
        {
            "model": r["model"],
            "verdict": r["verdict"],
            "ratio": r["ratio"],
            "ci": r["ci"],
            "n": (r.get("stats") or {}).get("n_base"),
            "elapsed_s": (r.get("stats") or {}).get("elapsed_s"),
            "contention": (r.get("stats") or {}).get("contention"),
        }
        for r in doc["rows"]
    ]
    return {"exit_code": proc.returncode, "wall_s": time.time() - t0, "rows": rows}


def summarize(trials: list[dict]) -> dict:
    out: dict = {}
    rows = [r for t in trials for r in t["rows"]]
    for model in [*MODELS, "all"]:
        sel = [r for r in rows if model == "all" or r["model"] == model]
        if not sel:
            continue
        by = {
            v: sum(r["verdict"] == v for r in sel)
            for v in ("regressed", "pass", "inconclusive", "improved")
        }
        conts = sorted(r["contention"] for r in sel if r["contention"] is not None)
        out[model] = {
            "rows": len(sel),
            **by,
            "regressed_rate": by["regressed"] / len(sel),
            "contention_median": conts[len(conts) // 2] if conts else None,
        }
    out["exit_codes"] = [t["exit_code"] for t in trials]
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument(
        "--models-from",
        type=Path,
        required=True,
        help="flow_power.py's work directory (base and slow .onnx files)",
    )
    ap.add_argument("--injected", type=Path, help="flow_power.py's results (injected ratios)")
    ap.add_argument("--trials", type=int, default=6, help="guard ab invocations per variant")
    ap.add_argument("--budget-s", type=float, default=6.0, help="guard ab --budget-s")
    ap.add_argument("--conditions", type=condition_list, default=list(CONDITIONS))
    ap.add_argument("--out", type=Path, required=True)
    args = ap.parse_args(argv)
    root = Path(tempfile.mkdtemp(prefix="guard-abref-"))
    repo, shas = make_repo(root, args.models_from)
    injected = json.loads(args.injected.read_text())["injected"] if args.injected else None
    results = {
        "command": " ".join([Path(sys.executable).name, *sys.argv]),
        "host": {"machine": platform.machine(), "cpus": os.cpu_count()},
        "budget_s": args.budget_s,
        "commits": shas,
        "injected": injected,
        "conditions": [],
    }
    for cond in args.conditions:
        tenant = start_cotenant(cond)
        parts: dict = {"condition": cond}
        t0 = time.time()
        try:
            trials: dict[str, list[dict]] = {k: [] for k, _ in VARIANTS}
            for i in range(args.trials):
                for key, variant in VARIANTS:
                    trials[key].append(
                        trial(
                            repo,
                            shas["base"],
                            shas[variant],
                            root / f"{cond}-{key}-{i}.json",
                            args.budget_s,
                            root / "cache" / "envs",
                        )
                    )
                print(
                    f"  {cond}: {i + 1}/{args.trials} ({time.time() - t0:.0f} s)", file=sys.stderr
                )
        finally:
            if tenant is not None:
                tenant.kill()
                tenant.wait()
        parts["elapsed_s"] = time.time() - t0
        for key, _ in VARIANTS:
            parts[key] = {"summary": summarize(trials[key]), "trials": trials[key]}
        results["conditions"].append(parts)
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(json.dumps(results, indent=1, default=str) + "\n")
    for c in results["conditions"]:
        print(f"== {c['condition']} ({c['elapsed_s']:.0f} s)")
        for key, _ in VARIANTS:
            s = c[key]["summary"]
            a = s["all"]
            print(
                f"  {key}: {a['rows']} rows: {a['regressed']} regressed, {a['pass']} pass, "
                f"{a['inconclusive']} inconclusive, {a['improved']} improved; exit codes "
                f"{s['exit_codes']}; contention median {a['contention_median']}"
            )
    return 0


if __name__ == "__main__":
    sys.exit(main())
