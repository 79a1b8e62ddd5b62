"""False regressions and power of the user-level flow: two `guard run --json`, then compare.

What a user does on a shared runner: run the suite in one process, later run it again in
another, and ask `guard compare BASE HEAD`. This benchmark does exactly that, over three
onnxruntime models of very different size (zoo mlp ~0.04 ms, squeezenet ~8 ms,
inception_v1 ~30 ms; 1 thread), with and without a co-tenant process busy on the other core
(``--conditions``: no-cotenant, cotenant pinned to the cores guard does not measure on, and
cotenant-any, the same process left to the scheduler).

Slowdowns are injected as benchmarks/regress_power.py injects them: an extra branch whose
output is an extra graph output, so the model's own output is bit-identical and the
session must compute the branch on every run. Here the branch is the model input viewed as
[-1, 256] times a [256, cols] weight, reduced to a scalar; ``cols`` is calibrated per model
from the branch's own cost measured in alternation with the model, so that the branch
costs 5% or 10%, and the injected ratio actually measured is recorded next to the target.

Trials from processes, honestly stated: one `guard run` process costs seconds, and 100
trials x 2 processes per condition would take hours on this 2-core machine. So each
condition runs N independent `guard run` processes per variant (base, +5%, +10%; order
rotated so drift hits every variant alike), and trials are formed from distinct pairs of
processes: A/A from every pair of base processes (N(N-1)/2), slowdowns from every (base,
slow) pair (N^2). Pairs that share a process are not independent trials: the rates are
over many pairs, but their uncertainty is that of N processes, not of the pair count.
The done-when checks use the real command line: `guard compare` exit codes on N A/A pairs
(base_i, base_{i+1}) and N (base_i, slow10_i) pairs.

Contention per trial is the larger of the two processes' contention for that model (other
processes' share of the spare CPU in the worst round, from /proc/stat minus guard's own
CPU) and the smaller CPU share (guard's own CPU time over wall time in its worst round).

    .venv/bin/python benchmarks/flow_power.py --processes 10 --calibrate-runs 0 \
        --min-time-s 3 --out benchmarks/results/flow_power_host_adjusted.json
"""

from __future__ import annotations

import argparse
import itertools
import json
import os
import platform
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

from guard.compare.compare import compare_docs
from guard.measure.round_runner import measuring_cpus
from guard.results.load import load_results
from guard.stats.calibrate import load_noise
from guard.stats.regress import RegressConfig

MODELS = {  # zoo name -> (input name, shape)
    "mlp": ("x", [1, 256]),
    "squeezenet": ("data_0", [1, 3, 224, 224]),
    "inception_v1": ("data_0", [1, 3, 224, 224]),
}
MAX_COLS = 8192  # a 256 x 8192 weight is 8 MiB: a calibration fooled by a busy machine stays sane
MEASURE = (
    "{{warmup_s: 0.25, min_iters: 10, min_time_s: {min_time_s}, max_time_s: 30, rounds: {rounds}}}"
)
COTENANT = (
    "import numpy as np\n"
    "a = np.random.default_rng(0).standard_normal((512, 512)).astype(np.float32)\n"
    "while True:\n    a = np.tanh(a @ a)\n"
)
# The co-tenant conditions: "cotenant" is one busy process on the other core (pinned to
# the cores guard does not measure on); "cotenant-any" leaves it to the scheduler, which
# now and then puts it on guard's core between rounds (worst rounds then get 80-90% of
# the core), a harder condition than the other core alone.
CONDITIONS = ("no-cotenant", "cotenant", "cotenant-any")


def condition_list(text: str) -> list[str]:
    """``--conditions``: comma-separated names from CONDITIONS (an argparse type)."""
    names = text.split(",")
    unknown = sorted(set(names) - set(CONDITIONS))
    if unknown:
        raise argparse.ArgumentTypeError(
            f"unknown condition(s) {', '.join(unknown)}: use {', '.join(CONDITIONS)}"
        )
    return names


def start_cotenant(condition: str) -> subprocess.Popen | None:
    """The condition's co-tenant process (1 BLAS thread), or None for "no-cotenant"."""
    if condition == "no-cotenant":
        return None
    env = dict(os.environ, OMP_NUM_THREADS="1", OPENBLAS_NUM_THREADS="1")
    cpus = None
    if condition == "cotenant" and hasattr(os, "sched_getaffinity"):
        measured = measuring_cpus(1) or set()
        cpus = (os.sched_getaffinity(0) - measured) or None
    tenant = subprocess.Popen(
        [sys.executable, "-c", COTENANT],
        env=env,
        preexec_fn=(lambda: os.sched_setaffinity(0, cpus)) if cpus else None,
    )
    time.sleep(1.0)
    return tenant


def add_branch(model: onnx.ModelProto, inp: str, cols: int) -> onnx.ModelProto:
    """``model`` plus the slow side branch of width ``cols`` (its outputs unchanged)."""
    m = onnx.ModelProto()
    m.CopyFrom(model)
    g = m.graph
    rng = np.random.default_rng(1)
    w = numpy_helper.from_array(rng.standard_normal((256, cols)).astype(np.float32), "slow_w")
    shape = numpy_helper.from_array(np.array([-1, 256], np.int64), "slow_shape")
    g.initializer.extend([w, shape])
    if m.ir_version < 4:  # initializers must also be graph inputs before IR 4
        g.input.extend(
            [
                helper.make_tensor_value_info("slow_w", TensorProto.FLOAT, [256, cols]),
                helper.make_tensor_value_info("slow_shape", TensorProto.INT64, [2]),
            ]
        )
    g.node.extend(
        [
            helper.make_node("Reshape", [inp, "slow_shape"], ["slow_x"]),
            helper.make_node("MatMul", ["slow_x", "slow_w"], ["slow_m"]),
            helper.make_node("ReduceSum", ["slow_m"], ["z_slow"], keepdims=0),
        ]
    )
    g.output.append(helper.make_tensor_value_info("z_slow", TensorProto.FLOAT, []))
    return m


def _session(model: onnx.ModelProto):
    from guard.backends.onnxruntime import _ort, session_options

    return _ort().InferenceSession(
        model.SerializeToString(), session_options(1, "all"), providers=["CPUExecutionProvider"]
    )


def interleaved_ratio(base: onnx.ModelProto, head: onnx.ModelProto, feeds, seconds: float):
    """Median of head's CPU times over median of base's, from alternating calls.

    CPU time of the calling thread (onnxruntime runs a 1-thread session on it), not wall
    time: a calibration on a machine other processes keep busy must not read preemption
    as cost.
    """
    sb, sh = _session(base), _session(head)
    for _ in range(3):
        sb.run(None, feeds)
        sh.run(None, feeds)
    tbs, ths, end, i = [], [], time.perf_counter() + seconds, 0
    while time.perf_counter() < end or len(tbs) < 20:
        first, second = (sb, sh) if i % 2 == 0 else (sh, sb)
        t0 = time.thread_time()
        first.run(None, feeds)
        t1 = time.thread_time()
        second.run(None, feeds)
        t2 = time.thread_time()
        tb, th = (t1 - t0, t2 - t1) if i % 2 == 0 else (t2 - t1, t1 - t0)
        tbs.append(tb)
        ths.append(th)
        i += 1
    return float(np.median(ths) / np.median(tbs))


def branch_only(model: onnx.ModelProto, inp: str, cols: int) -> onnx.ModelProto:
    """Just the slow branch (same input), to time its cost per column on its own."""
    b = add_branch(model, inp, cols)
    g = b.graph
    keep = {"slow_x", "slow_m", "z_slow"}
    nodes = [n for n in g.node if set(n.output) & keep]
    inits = [t for t in g.initializer if t.name in ("slow_w", "slow_shape")]
    src = next(i for i in g.input if i.name == inp)
    graph = helper.make_graph(nodes, "branch", [src], [g.output[-1]], inits)
    m = helper.make_model(graph, opset_imports=list(model.opset_import))
    m.ir_version = max(model.ir_version, 4)
    return m


def calibrate(model: onnx.ModelProto, inp: str, shape, target: float) -> tuple[int, float]:
    """Branch width giving a ``target`` slowdown; returns (cols, measured ratio).

    The branch's cost is read off a branch-only model timed in alternation with the base
    model, then corrected (twice at most, each step by at most 2x) against the full
    variant measured the same way; the final variant's measured ratio is recorded.
    """
    feeds = {inp: np.random.default_rng(0).standard_normal(shape).astype(np.float32)}
    probe = 256
    cost = interleaved_ratio(model, branch_only(model, inp, probe), feeds, 3.0)
    cols = int(min(MAX_COLS, max(1, round(target / cost * probe))))
    for _ in range(2):  # inside the model the branch costs more than alone (caches, overhead)
        got = interleaved_ratio(model, add_branch(model, inp, cols), feeds, 3.0) - 1.0
        if abs(got - target) <= 0.2 * target:
            break
        step = min(2.0, max(0.5, target / max(got, 1e-3)))
        cols = int(min(MAX_COLS, max(1, round(cols * step))))
    return cols, interleaved_ratio(model, add_branch(model, inp, cols), feeds, 4.0)


def write_suite(d: Path, models: dict[str, Path], measure: str) -> Path:
    d.mkdir(parents=True, exist_ok=True)
    lines = [
        "schema_version: 1",
        "suite: flow",
        "defaults:",
        "  backends: [onnxruntime]",
        "  threads: 1",
        f"  measure: {measure}",
        "models:",
    ]
    for name, path in models.items():
        inp, shape = MODELS[name]
        lines += [
            f"  - name: {name}",
            f"    source: {path}",
            "    inputs:",
            f"      {inp}: {{shape: {shape}, dist: normal, seed: 0}}",
        ]
    p = d / "suite.yaml"
    p.write_text("\n".join(lines) + "\n")
    return p


def guard_run(suite: Path, out: Path, work: Path) -> dict:
    env = dict(os.environ, MLFLOW_DISABLE_TELEMETRY="true")
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "guard.cli.main",
            "run",
            str(suite),
            "--json",
            str(out),
            "--no-track",
        ],
        cwd=work,
        env=env,
        capture_output=True,
        text=True,
        timeout=900,
    )
    if proc.returncode not in (0, 1) or not out.is_file():
        sys.exit(f"guard run {suite} exited {proc.returncode}: {proc.stderr[-2000:]}")
    return load_results(out)


def guard_compare(base: Path, head: Path, noise: Path | None = None) -> int:
    env = dict(os.environ, MLFLOW_DISABLE_TELEMETRY="true")
    extra = ["--noise", str(noise)] if noise is not None else []
    return subprocess.run(
        [
            sys.executable,
            "-m",
            "guard.cli.main",
            "compare",
            str(base),
            str(head),
            "--quiet",
            *extra,
        ],
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    ).returncode


def _conditions(r: dict) -> tuple[float | None, float | None]:
    m = r.get("measurement") or {}
    return m.get("contention"), m.get("cpu_share")


def trial_rows(
    base: dict, head: dict, cfg: RegressConfig, run_noise: dict[str, float] | None = None
) -> list[dict]:
    cmp = compare_docs(base, head, cfg, run_noise=run_noise)
    b = {r["model"]: r for r in base["results"]}
    h = {r["model"]: r for r in head["results"]}
    out = []
    for row in cmp["rows"]:
        (cb, sb), (ch, sh) = _conditions(b[row["model"]]), _conditions(h[row["model"]])
        conts = [c for c in (cb, ch) if c is not None]
        shares = [s for s in (sb, sh) if s is not None]
        out.append(
            {
                "model": row["model"],
                "verdict": row["verdict"],
                "ratio": row["ratio"],
                "mde_pct": (row["stats"] or {}).get("mde_pct"),
                "ci": row.get("ci"),
                "reason": row["reason"],
                "contention": max(conts) if conts else None,
                "contention_sides": [cb, ch],
                "cpu_share": min(shares) if shares else None,
                "noise_pct": [b[row["model"]].get("noise_pct"), h[row["model"]].get("noise_pct")],
            }
        )
    return out


def summarize(rows: list[dict]) -> dict:
    out: dict = {}
    for model in [*MODELS, "all"]:
        sel = [r for r in rows if model == "all" or r["model"] == model]
        if not sel:
            continue
        n = len(sel)
        by = {
            v: sum(r["verdict"] == v for r in sel)
            for v in ("regressed", "pass", "inconclusive", "improved")
        }
        conts = sorted(r["contention"] for r in sel if r["contention"] is not None)
        shares = sorted(r["cpu_share"] for r in sel if r["cpu_share"] is not None)
        out[model] = {
            "rows": n,
            **by,
            "regressed_rate": by["regressed"] / n,
            "contention_median": conts[len(conts) // 2] if conts else None,
            "cpu_share_median": shares[len(shares) // 2] if shares else None,
        }
    return out


def calibrate_runs(suite: Path, runs: int, work: Path) -> tuple[Path, dict[str, float]]:
    """`guard calibrate SUITE --rounds 0 --runs K`: each result's run noise, into a file."""
    out = work / "noise.json"
    env = dict(os.environ, MLFLOW_DISABLE_TELEMETRY="true")
    cmd = [sys.executable, "-m", "guard.cli.main", "calibrate", str(suite), "--rounds", "0"]
    cmd += ["--runs", str(runs), "--no-track", "--out", str(out)]
    proc = subprocess.run(cmd, cwd=work, env=env, capture_output=True, text=True, timeout=3600)
    if proc.returncode != 0:
        sys.exit(f"guard calibrate exited {proc.returncode}: {proc.stderr[-2000:]}")
    return out, load_noise(out, "run")


def _parts(base: list, docs: dict, run_noise: dict[str, float] | None) -> dict:
    cfg = RegressConfig()
    aa = [
        row
        for (_, a), (_, b) in itertools.combinations(base, 2)
        for row in trial_rows(a, b, cfg, run_noise)
    ]
    out: dict = {
        "aa": {"pairs": len(base) * (len(base) - 1) // 2, "summary": summarize(aa), "rows": aa}
    }
    for v in docs:
        if v == "base":
            continue
        rows = [
            row for (_, a) in base for (_, b) in docs[v] for row in trial_rows(a, b, cfg, run_noise)
        ]
        out[v] = {"pairs": len(base) * len(docs[v]), "summary": summarize(rows), "rows": rows}
    return out


def run_condition(
    name: str,
    suites: dict[str, Path],
    n: int,
    work: Path,
    noise: tuple[Path, dict[str, float]] | None = None,
) -> dict:
    tenant = start_cotenant(name)
    docs: dict[str, list[tuple[Path, dict]]] = {v: [] for v in suites}
    t0 = time.time()
    try:
        variants = list(suites)
        for i in range(n):
            order = variants[i % len(variants) :] + variants[: i % len(variants)]
            for v in order:
                out = work / f"{name}-{v}-{i}.json"
                docs[v].append((out, guard_run(suites[v], out, work)))
            print(
                f"  {name}: {i + 1}/{n} rounds of processes ({time.time() - t0:.0f} s)",
                file=sys.stderr,
            )
    finally:
        if tenant is not None:
            tenant.kill()
            tenant.wait()
    base = docs["base"]
    result: dict = {
        "condition": name,
        "cotenant": name != "no-cotenant",
        "processes_per_variant": n,
        "elapsed_s": time.time() - t0,
        **_parts(base, docs, None),
    }
    # The user's command line on disjoint-enough pairs: the done-when exit codes.
    result["cli"] = {
        "aa_exit_codes": [guard_compare(base[i][0], base[(i + 1) % n][0]) for i in range(n)],
        "slow10_exit_codes": [guard_compare(base[i][0], docs["slow10"][i][0]) for i in range(n)],
    }
    if noise is not None:  # the same pairs, judged with each model's calibrated run noise
        path, run_noise = noise
        result["calibrated"] = _parts(base, docs, run_noise)
        result["calibrated"]["cli"] = {
            "aa_exit_codes": [
                guard_compare(base[i][0], base[(i + 1) % n][0], path) for i in range(n)
            ],
            "slow10_exit_codes": [
                guard_compare(base[i][0], docs["slow10"][i][0], path) for i in range(n)
            ],
        }
    return result


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--processes", type=int, default=10, help="guard run processes per variant")
    ap.add_argument("--rounds", type=int, default=10, help="rounds per result (guard's default)")
    ap.add_argument(
        "--min-time-s", type=float, default=1.0, help="timed seconds per result, all rounds"
    )
    ap.add_argument("--conditions", type=condition_list, default=list(CONDITIONS))
    ap.add_argument("--work", type=Path, help="work directory (default: a temporary one)")
    ap.add_argument(
        "--calibrate-runs",
        type=int,
        default=5,
        help="`guard calibrate --runs K` on the base suite first, and every condition "
        "judged both ways (default %(default)s; 0: not calibrated)",
    )
    ap.add_argument("--out", type=Path, required=True)
    args = ap.parse_args(argv)
    from guard.zoo import model_path

    work = args.work or Path(tempfile.mkdtemp(prefix="guard-flow-"))
    work.mkdir(parents=True, exist_ok=True)
    variants: dict[str, dict[str, Path]] = {"base": {}, "slow5": {}, "slow10": {}}
    injected: dict[str, dict] = {}
    for name, (inp, shape) in MODELS.items():
        model = onnx.load(str(model_path(name)))
        base_path = work / f"{name}.onnx"
        onnx.save(model, base_path)
        variants["base"][name] = base_path
        injected[name] = {}
        for v, target in (("slow5", 0.05), ("slow10", 0.10)):
            cols, ratio = calibrate(model, inp, shape, target)
            p = work / f"{name}-{v}.onnx"
            onnx.save(add_branch(model, inp, cols), p)
            variants[v][name] = p
            injected[name][v] = {"target": target, "cols": cols, "measured_ratio": ratio}
            print(f"{name} {v}: {cols} cols, measured {ratio:.3f}", file=sys.stderr)
    measure = MEASURE.format(rounds=args.rounds, min_time_s=args.min_time_s)
    suites = {v: write_suite(work / v, models, measure) for v, models in variants.items()}
    results = {
        "command": " ".join([Path(sys.executable).name, *sys.argv]),
        "host": {"machine": platform.machine(), "cpus": os.cpu_count()},
        "measure": measure,
        "injected": injected,
        "conditions": [],
    }
    noise = None
    if args.calibrate_runs:
        t0 = time.time()
        noise = calibrate_runs(suites["base"], args.calibrate_runs, work)
        results["calibration"] = {
            "runs": args.calibrate_runs,
            "run_noise_pct": noise[1],
            "elapsed_s": time.time() - t0,
        }
        print(f"calibrated run noise: {noise[1]}", file=sys.stderr)
    for cond in args.conditions:
        results["conditions"].append(run_condition(cond, suites, args.processes, work, noise))
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(json.dumps(results, indent=1, default=str) + "\n")
    for c in results["conditions"]:
        print(f"== {c['condition']} ({c['elapsed_s']:.0f} s)")
        for label, judged in (("default", c), ("calibrated", c.get("calibrated"))):
            if judged is None:
                continue
            print(f" {label}:")
            for part in ("aa", "slow5", "slow10"):
                s = judged[part]["summary"]["all"]
                print(
                    f"  {part}: {s['rows']} rows over {judged[part]['pairs']} pairs: "
                    f"{s['regressed']} regressed, {s['pass']} pass, {s['inconclusive']} "
                    f"inconclusive, {s['improved']} improved; contention median "
                    f"{s['contention_median']}"
                )
            print(
                f"  cli: A/A exit codes {judged['cli']['aa_exit_codes']}, slow10 exit codes "
                f"{judged['cli']['slow10_exit_codes']}"
            )
    return 0


if __name__ == "__main__":
    sys.exit(main())
