"""A/A false-regression rate and power curve of guard's regression statistics, on real timing.

The artefact is a small onnxruntime MLP (4 MatMul+Relu layers, batch 16, 1 thread). The
injected slowdown is an extra branch: a MatMul of the input against a wide weight, reduced
to a scalar and exposed as an extra graph output. The original output is bit-identical
(checked), the session computes the branch on every run, and the branch width is
calibrated against the measured median to hit each target percentage; the ratio actually
injected is then measured separately (interleaved, long) and reported next to the target.

Modes:
  ab          interleaved A/B in one process (guard ab): adaptive, paired Wilcoxon.
  sequential  base measured, then head (what `guard compare` of two results files sees):
              fixed time per side, Mann-Whitney + bootstrap.

--calibrate N first runs guard calibrate's N A/A rounds on the artefact and judges with
threshold max(regress_pct, calibrated noise), as `guard compare` does once a suite has
been calibrated.

Each trial builds fresh sessions for both sides, so an A/A trial also carries the
session-to-session difference two identical artefacts really have. Other processes' CPU
use during the trial (/proc/stat minus our own) is recorded as contention.

    .venv/bin/python benchmarks/regress_power.py --aa-trials 200 --trials 100 \
        --levels 0.02,0.05,0.10,0.20 --modes ab --out benchmarks/results/power.json
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from collections.abc import Sequence
from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort
from onnx import TensorProto, helper, numpy_helper
from scipy import stats

from guard.experiment.ab import run_ab
from guard.measure.calls import warm_up
from guard.measure.preflight import contention_between, read_cpu_times
from guard.stats.calibrate import calibrate_fn
from guard.stats.regress import REGRESSED, Comparison, RegressConfig, with_noise
from guard.stats.verdicts import clean_samples, decide, mde_pct, too_few

BATCH, WIDTH, LAYERS = 16, 512, 4


def build_model(extra_cols: int = 0, seed: int = 0) -> bytes:
    """The MLP; with extra_cols > 0, plus the side branch of that width (outputs unchanged)."""
    rng = np.random.default_rng(seed)
    inits, nodes = [], []
    prev = "x"
    for i in range(LAYERS):
        w = (rng.standard_normal((WIDTH, WIDTH)) / np.sqrt(WIDTH)).astype(np.float32)
        inits.append(numpy_helper.from_array(w, f"w{i}"))
        nodes.append(helper.make_node("MatMul", [prev, f"w{i}"], [f"m{i}"]))
        nodes.append(helper.make_node("Relu", [f"m{i}"], [f"r{i}"]))
        prev = f"r{i}"
    nodes.append(helper.make_node("Identity", [prev], ["y"]))
    outputs = [helper.make_tensor_value_info("y", TensorProto.FLOAT, [BATCH, WIDTH])]
    if extra_cols > 0:
        wx = rng.standard_normal((WIDTH, extra_cols)).astype(np.float32)
        inits.append(numpy_helper.from_array(wx, "wx"))
        nodes.append(helper.make_node("MatMul", ["x", "wx"], ["xb"]))
        nodes.append(helper.make_node("ReduceSum", ["xb"], ["z_slow"], keepdims=0))
        # Named to sort after "y": guard/golden/store.py (as of 13:40) pairs outputs.npz's
        # arrays with the meta's name-sorted outputs, so a name sorting first breaks reload.
        outputs.append(helper.make_tensor_value_info("z_slow", TensorProto.FLOAT, []))
    graph = helper.make_graph(
        nodes,
        "mlp",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [BATCH, WIDTH])],
        outputs,
        inits,
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    onnx.checker.check_model(model)
    return model.SerializeToString()


FEEDS = {"x": np.random.default_rng(1).standard_normal((BATCH, WIDTH)).astype(np.float32)}


def session(model: bytes):
    so = ort.SessionOptions()
    so.intra_op_num_threads = 1
    so.inter_op_num_threads = 1
    so.execution_mode = ort.ExecutionMode.ORT_SEQUENTIAL
    sess = ort.InferenceSession(model, so, providers=["CPUExecutionProvider"])

    def run() -> None:
        sess.run(None, FEEDS)

    return sess, run


def interleaved_median_ratio(fa, fb, seconds: float) -> float:
    """Median of per-pair ratios fb/fa over ``seconds`` of alternating calls (calibration)."""
    warm_up(fa, 0.3, min_calls=1)
    warm_up(fb, 0.3, min_calls=1)
    ratios, t_end, i = [], time.perf_counter() + seconds, 0
    while time.perf_counter() < t_end:
        first, second = (fa, fb) if i % 2 == 0 else (fb, fa)
        t0 = time.perf_counter()
        first()
        t1 = time.perf_counter()
        second()
        t2 = time.perf_counter()
        ta, tb = (t1 - t0, t2 - t1) if i % 2 == 0 else (t2 - t1, t1 - t0)
        ratios.append(tb / ta)
        i += 1
    return float(np.median(ratios))


def calibrate_branch(
    target: float, probe_cols: int = 256, seconds: float = 3.0
) -> tuple[int, float]:
    """Branch width giving ``target`` slowdown; returns (cols, measured ratio)."""
    base = build_model()
    _, fa = session(base)
    _, fp = session(build_model(probe_cols))
    per_col = (interleaved_median_ratio(fa, fp, seconds) - 1.0) / probe_cols
    cols = max(1, round(target / max(per_col, 1e-9)))
    for _ in range(2):  # one or two corrections: the cost is not exactly linear in width
        _, fs = session(build_model(cols))
        got = interleaved_median_ratio(fa, fs, seconds) - 1.0
        if abs(got - target) <= 0.1 * target:
            break
        cols = max(1, round(cols * target / max(got, 1e-4)))
    _, fs = session(build_model(cols))
    ref = session(base)[0].run(["y"], FEEDS)[0]
    slow_y = session(build_model(cols))[0].run(["y"], FEEDS)[0]
    if not np.array_equal(ref, slow_y):
        sys.exit("the slow branch changed the model's output; the benchmark would be unfair")
    return cols, interleaved_median_ratio(fa, fs, seconds)


def trial_ab(base: bytes, head: bytes, cfg: RegressConfig, budget_s: float) -> dict:
    _, fb = session(base)
    _, fh = session(head)
    out = run_ab(fb, fh, cfg, budget_s=budget_s, warmup_s=0.2)
    c = out.result.comparison
    return {
        "verdict": c.verdict,
        "ratio": c.ratio,
        "mde_pct": c.mde_pct,
        "n": c.n_base,
        "elapsed_s": out.result.elapsed_s,
        "contention": out.contention,
    }


def compare_unpaired(
    base: Sequence[float],
    head: Sequence[float],
    config: RegressConfig | None = None,
    *,
    alpha: float | None = None,
) -> Comparison:
    """Judge two independent sample sets (ms) as iterations: Mann-Whitney U each way and a
    percentile bootstrap CI of the ratio of medians, through guard's rule (``decide``).

    guard itself no longer judges iterations (results files are judged on rounds, guard ab
    on pairs); this is the sequential mode's subject, kept here so the mode reproduces."""
    cfg = config or RegressConfig()
    a = cfg.alpha if alpha is None else alpha
    method = "mann-whitney+bootstrap"
    b, h = clean_samples(base, "base"), clean_samples(head, "head")
    if min(b.size, h.size) < cfg.min_samples:
        return too_few(b.size, h.size, cfg, method, a)
    ratio = float(np.median(h) / np.median(b))
    p_slower = float(stats.mannwhitneyu(h, b, alternative="greater").pvalue)
    p_faster = float(stats.mannwhitneyu(h, b, alternative="less").pvalue)
    if np.all(h == h[0]) and np.all(b == b[0]):
        lo = hi = ratio  # degenerate: no spread, the bootstrap has nothing to say
    else:
        res = stats.bootstrap(
            (h, b),
            lambda x, y, axis: np.median(x, axis=axis) / np.median(y, axis=axis),
            paired=False,
            vectorized=True,
            n_resamples=cfg.n_boot,
            batch=max(1, int(2e7 // max(h.size, b.size))),
            confidence_level=1 - 2 * a,
            method="percentile",
            rng=np.random.default_rng(cfg.seed),
        )
        lo, hi = float(res.confidence_interval.low), float(res.confidence_interval.high)
    verdict, reason = decide(ratio, lo, hi, p_slower, p_faster, cfg, a)
    return Comparison(
        verdict, ratio, (lo, hi), p_slower, p_faster, cfg.threshold_pct,
        mde_pct(lo, hi, cfg, a), int(b.size), int(h.size), method, a, reason,
    )  # fmt: skip


def trial_sequential(base: bytes, head: bytes, cfg: RegressConfig, per_side_s: float) -> dict:
    def collect(fn) -> list[float]:
        warm_up(fn, 0.2, min_calls=1)
        s, t_end = [], time.perf_counter() + per_side_s
        while time.perf_counter() < t_end:
            t0 = time.perf_counter()
            fn()
            s.append((time.perf_counter() - t0) * 1000)
        return s

    before = read_cpu_times()
    t0 = time.perf_counter()
    b = collect(session(base)[1])
    h = collect(session(head)[1])
    c = compare_unpaired(b, h, cfg)
    return {
        "verdict": c.verdict,
        "ratio": c.ratio,
        "mde_pct": c.mde_pct,
        "n": c.n_base,
        "elapsed_s": time.perf_counter() - t0,
        "contention": contention_between(before, read_cpu_times()),
    }


def summarize(trials: list[dict]) -> dict:
    verdicts = [t["verdict"] for t in trials]
    cont = [t["contention"] for t in trials if t["contention"] is not None]
    return {
        "trials": len(trials),
        "regressed": verdicts.count(REGRESSED),
        "rate_regressed": verdicts.count(REGRESSED) / len(trials),
        "by_verdict": {v: verdicts.count(v) for v in sorted(set(verdicts))},
        "median_ratio": statistics.median(t["ratio"] for t in trials),
        "median_mde_pct": statistics.median(t["mde_pct"] for t in trials),
        "median_n": statistics.median(t["n"] for t in trials),
        "median_elapsed_s": statistics.median(t["elapsed_s"] for t in trials),
        "max_elapsed_s": max(t["elapsed_s"] for t in trials),
        "contention_median": statistics.median(cont) if cont else None,
        "contention_max": max(cont) if cont else None,
        "per_trial": [
            {k: (round(v, 5) if isinstance(v, float) else v) for k, v in t.items()} for t in trials
        ],
    }


def brief(summary: dict) -> str:
    return json.dumps({k: v for k, v in summary.items() if k != "per_trial"})


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("--aa-trials", type=int, default=200)
    ap.add_argument("--trials", type=int, default=100, help="trials per slowdown level")
    ap.add_argument("--levels", default="0.02,0.05,0.10,0.20")
    ap.add_argument("--modes", default="ab", help="ab, sequential, or ab,sequential")
    ap.add_argument(
        "--budget-s", type=float, default=20.0, help="ab: both sides together (<=10 s each)"
    )
    ap.add_argument("--per-side-s", type=float, default=1.0, help="sequential: seconds per side")
    ap.add_argument("--regress-pct", type=float, default=3.0)
    ap.add_argument(
        "--calibrate",
        type=int,
        default=0,
        metavar="ROUNDS",
        help="calibrate noise first (guard calibrate's A/A rounds, 1 s each) and use it",
    )
    ap.add_argument("--out", type=Path, default=Path("benchmarks/results/regress_power.json"))
    args = ap.parse_args(argv)

    cfg = RegressConfig(regress_pct=args.regress_pct, n_boot=1000)
    levels = [float(x) for x in args.levels.split(",") if x]
    base = build_model()
    t_start = time.time()
    report: dict = {
        "started": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "model": f"MLP {LAYERS}x MatMul+Relu, {BATCH}x{WIDTH}, onnxruntime {ort.__version__}, 1 thread",
        "config": {
            "regress_pct": cfg.regress_pct,
            "alpha": cfg.alpha,
            "budget_s": args.budget_s,
            "per_side_s": args.per_side_s,
        },
        "command": " ".join(sys.argv),
        "injected": {},
        "modes": {},
    }
    injected = {}
    for lv in levels:
        cols, measured = calibrate_branch(lv)
        injected[lv] = build_model(cols)
        report["injected"][f"{lv:.2f}"] = {"branch_cols": cols, "measured_ratio": measured}
        print(f"level {lv:.0%}: branch width {cols}, measured ratio {measured:.4f}", flush=True)

    for mode in args.modes.split(","):
        mcfg = cfg
        if args.calibrate:
            # What `guard calibrate` does for a suite: A/A rounds of the artefact against
            # itself; the threshold becomes max(regress_pct, that mode's noise).
            entry = calibrate_fn(
                session(base)[1],
                rounds=args.calibrate,
                round_s=1.0,
                reload=lambda: session(base)[1],
            )
            noise = entry["paired_noise_pct"] if mode == "ab" else entry["noise_pct"]
            mcfg = with_noise(cfg, noise)
            report.setdefault("calibration", {})[mode] = {
                "noise_pct": noise,
                "threshold_pct": mcfg.threshold_pct,
                "rounds": args.calibrate,
            }
            print(f"[{mode}] calibrated noise {noise:.2f}% -> threshold {mcfg.threshold_pct:.2f}%")
        run = (
            (lambda b, h, c=mcfg: trial_ab(b, h, c, args.budget_s))
            if mode == "ab"
            else (lambda b, h, c=mcfg: trial_sequential(b, h, c, args.per_side_s))
        )

        def trials(head: bytes, n: int, what: str, run=run, mode=mode) -> list[dict]:
            out = []
            for i in range(n):
                out.append(run(base, head))
                if (i + 1) % 50 == 0:
                    bad = sum(t["verdict"] == REGRESSED for t in out)
                    print(f"  [{mode}] {what}: {i + 1}/{n}, {bad} regressed", flush=True)
            return out

        res = {}
        if args.aa_trials:
            res["aa"] = summarize(trials(base, args.aa_trials, "A/A"))
            print(f"[{mode}] A/A: {brief(res['aa'])}", flush=True)
        for lv in levels:
            res[f"{lv:.2f}"] = summarize(trials(injected[lv], args.trials, f"{lv:.0%}"))
            print(f"[{mode}] {lv:.0%}: {brief(res[f'{lv:.2f}'])}", flush=True)
        report["modes"][mode] = res
    report["wall_s"] = time.time() - t_start
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(report, indent=2) + "\n")
    print(f"wrote {args.out} in {report['wall_s']:.0f} s")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
