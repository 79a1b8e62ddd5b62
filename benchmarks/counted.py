"""Counted cost (guard run --counted): spread across processes, and the flow wall time misses.

Counts are not timings: the instructions and bytes an inference executes under the
emulator do not depend on the machine's load, so this benchmark is valid on a shared,
heavily loaded runner. Two parts, every figure from real `guard run --counted` processes:

- **spread**: N separate processes of a suite of three zoo models of different size
  (mlp, transformer layer, inception block) on each backend: onnxruntime and tvm (Python
  under qemu-x86_64 -cpu max; tvm with ``--spread-backends``), bundled for this host (counted as its x86-64-v3 build) and
  bundled for AArch64 (static runner under qemu-aarch64). Per (model, backend): min, max
  and (max-min)/min of instructions per inference over the processes, and the counted run's
  cost in seconds.
- **flow**: a small conv net (3 x Conv3x3 16->16 + Relu at 24x24, output y = r2 +
  ReduceSum(b) * 0, b = x) and variants with injected extra work, outputs unchanged: a
  convolution branch b = Conv(x) in front of the ReduceSum: 3x3 16->12 ("+24%"), 3x3
  16->7 ("+15%"), 1x1 16->16 ("+5%") and 1x1 16->1 ("+1%", one small extra op). Variants
  are named by the cost aimed at; the count change each really makes is in the table. Each trial is one
  `guard run --counted` of the base suite and one of each variant, in separate processes,
  then `guard compare BASE VARIANT` for each: the counted verdict (per backend) against
  the wall-time verdict of the same comparison. Consecutive trials' base runs make the
  A/A pairs.

    .venv/bin/python benchmarks/counted.py --spread-processes 10 --trials 10 \
        --out benchmarks/results/counted.json
"""

from __future__ import annotations

import argparse
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

AARCH64 = "llvm -mtriple=aarch64-linux-gnu -mattr=+neon"
BACKENDS = ("onnxruntime", "tvm", "bundled-x86-64-v3", "bundled-aarch64")
SPREAD_MODELS = {  # zoo model -> (input, shape)
    "mlp": ("x", [1, 256]),
    "transformer": ("x", [1, 128, 256]),
    "inception_block": ("x", [1, 192, 28, 28]),
}
# The injected branch: a Conv 16->C with a KxK kernel in front of the zero term, (C, K).
VARIANTS = {"slow24": (12, 3), "slow15": (7, 3), "slow5": (16, 1), "slow1": (1, 1)}
CH, SIZE = 16, 24


def conv_net(branch: tuple[int, int] | None, seed: int = 0) -> onnx.ModelProto:
    """The flow's net; ``branch``: None (base) or (C, K), a Conv KxK 16->C side branch.

    Every model ends the same way, y = r2 + ReduceSum(b) * 0 (b = x in the base), so a
    variant differs from the base only by its injected work, never by how its output is
    written."""
    rng = np.random.default_rng(seed)
    inits, nodes = [], []
    prev = "x"
    for i in range(3):
        w = (rng.standard_normal((CH, CH, 3, 3)) * 0.1).astype(np.float32)
        inits.append(numpy_helper.from_array(w, f"w{i}"))
        nodes += [
            helper.make_node("Conv", [prev, f"w{i}"], [f"c{i}"], pads=[1, 1, 1, 1]),
            helper.make_node("Relu", [f"c{i}"], [f"r{i}"]),
        ]
        prev = f"r{i}"
    src = "x"
    if branch:
        c, k = branch
        wb = (rng.standard_normal((c, CH, k, k)) * 0.1).astype(np.float32)
        inits.append(numpy_helper.from_array(wb, "wb"))
        pad = k // 2
        nodes.append(helper.make_node("Conv", ["x", "wb"], ["bc"], pads=[pad] * 4))
        src = "bc"
    inits.append(numpy_helper.from_array(np.array([1], np.int64), "axes"))
    inits.append(numpy_helper.from_array(np.zeros((1,), np.float32), "zero"))
    nodes += [
        helper.make_node("ReduceSum", [src, "axes"], ["bs"], keepdims=1),
        helper.make_node("Mul", ["bs", "zero"], ["bz"]),
        helper.make_node("Add", [prev, "bz"], ["y"]),
    ]
    graph = helper.make_graph(
        nodes, "net",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, CH, SIZE, SIZE])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, CH, SIZE, SIZE])],
        inits,
    )  # fmt: skip
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    onnx.checker.check_model(model)
    return model


MEASURE = "{warmup_s: 0.1, min_iters: 20, min_time_s: 0.5, max_time_s: 3, rounds: 3, " \
    "counted: {inferences: 5, warmup: 3, max_s: 1800}}"  # fmt: skip


def flow_suite(d: Path, model: Path) -> Path:
    d.mkdir(parents=True, exist_ok=True)
    text = f"""schema_version: 1
suite: counted_flow
defaults:
  threads: 1
  measure: {MEASURE}
  checks:
    tolerance: {{rtol: 1.0e-4, atol: 1.0e-4}}
    latency: {{regress_pct: 3}}
models:
  - name: net
    source: {model}
    inputs:
      x: {{shape: [1, {CH}, {SIZE}, {SIZE}], dist: normal, seed: 0}}
    backends: [onnxruntime, bundled]
  - name: net_arm
    source: {model}
    inputs:
      x: {{shape: [1, {CH}, {SIZE}, {SIZE}], dist: normal, seed: 0}}
    backends: [bundled]
    target: "{AARCH64}"
"""
    path = d / "suite.yaml"
    path.write_text(text)
    return path


def spread_suite(d: Path, names: list[str], backends_of: list[str]) -> Path:
    """The spread suite over ``names`` (zoo models) and ``backends_of`` (of BACKENDS)."""
    d.mkdir(parents=True, exist_ok=True)
    models = []
    host = [b for b in ("onnxruntime", "tvm", "bundled") if b in backends_of
            or (b == "bundled" and "bundled-x86-64-v3" in backends_of)]  # fmt: skip
    kinds = [("", f"[{', '.join(host)}]", "host")] if host else []
    if "bundled-aarch64" in backends_of:
        kinds.append(("_arm", "[bundled]", AARCH64))
    for name, (inp, shape) in SPREAD_MODELS.items():
        if name not in names:
            continue
        for suffix, backends, target in kinds:
            models.append(f"""  - name: {name}{suffix}
    source: zoo:{name}
    inputs:
      {inp}: {{shape: {shape}, dist: normal, seed: 0}}
    backends: {backends}
    target: "{target}"
    checks:
      tolerance: {{rtol: 1.0e-3, atol: 1.0e-3}}
""")
    measure = ("{warmup_s: 0.01, min_iters: 3, min_time_s: 0.01, max_time_s: 0.5, rounds: 1, "
               "counted: {inferences: 5, warmup: 3, max_s: 1800}}")  # fmt: skip
    path = d / "suite.yaml"
    path.write_text(
        f"schema_version: 1\nsuite: counted_spread\ndefaults:\n  threads: 1\n"
        f"  measure: {measure}\nmodels:\n" + "".join(models)
    )
    return path


def guard_run(suite: Path, out: Path, work: Path) -> tuple[dict, float]:
    t0 = time.monotonic()
    proc = subprocess.run(
        [sys.executable, "-m", "guard.cli.main", "run", str(suite), "--counted", "--no-track",
         "--json", str(out)],
        cwd=work, capture_output=True, text=True, timeout=7200,
    )  # fmt: skip
    if not out.is_file():
        raise RuntimeError(f"guard run failed ({proc.returncode}): {proc.stderr[-2000:]}")
    return json.loads(out.read_text()), time.monotonic() - t0


def guard_compare(base: Path, head: Path, out: Path, work: Path) -> tuple[int, dict]:
    proc = subprocess.run(
        [sys.executable, "-m", "guard.cli.main", "compare", str(base), str(head), "--json",
         str(out)],
        cwd=work, capture_output=True, text=True, timeout=600,
    )  # fmt: skip
    return proc.returncode, json.loads(out.read_text())


def backend_of(r: dict) -> str:
    """The benchmark's backends, from a result or a counted comparison row."""
    if r["backend"] in ("onnxruntime", "tvm"):
        return str(r["backend"])
    target = str(r.get("counted_target") or r.get("target"))
    return "bundled-aarch64" if "aarch64" in target else "bundled-x86-64-v3"


def spread(work: Path, processes: int, log: list, names: list[str], backends: list[str]) -> None:
    suite = spread_suite(work / "spread", names, backends)
    for i in range(processes):
        doc, secs = guard_run(suite, work / f"spread_{i}.json", work)
        for r in doc["results"]:
            c = r.get("counted") or {}
            log.append({"part": "spread", "process": i, "model": r["model"].removesuffix("_arm"),
                        "backend": backend_of(r), "instructions": c.get("instructions"),
                        "bytes_loaded": c.get("bytes_loaded"), "bytes_stored": c.get("bytes_stored"),
                        "counted_s": c.get("wall_s"), "error": c.get("error"),
                        "fingerprint": c.get("fingerprint"), "run_s": secs})  # fmt: skip
        print(f"spread process {i + 1}/{processes}: {secs:.0f} s", file=sys.stderr, flush=True)


def flow(work: Path, trials: int, log: list, out: Path, doc: dict) -> None:
    models = {"base": conv_net(None)} | {v: conv_net(c) for v, c in VARIANTS.items()}
    suites = {}
    for name, model in models.items():
        d = work / "flow" / name
        d.mkdir(parents=True, exist_ok=True)
        onnx.save(model, d / "net.onnx")
        suites[name] = flow_suite(d, d / "net.onnx")
    prev_base: Path | None = None
    for t in range(trials):
        order = list(models)  # base first, the variants rotated so drift hits each alike
        order = [order[0], *order[1:][t % 4 :], *order[1:][: t % 4]]
        paths = {}
        for name in order:
            paths[name] = work / f"flow_{t}_{name}.json"
            _, secs = guard_run(suites[name], paths[name], work)
            print(f"trial {t + 1}: {name} {secs:.0f} s", file=sys.stderr, flush=True)
        pairs = [(v, paths["base"], paths[v]) for v in VARIANTS]
        if prev_base is not None:
            pairs.append(("aa", prev_base, paths["base"]))
        prev_base = paths["base"]
        for variant, base, head in pairs:
            code, cmp = guard_compare(base, head, work / f"cmp_{t}_{variant}.json", work)
            wall = {(r["model"], r["backend"], r["target"]): r for r in cmp["rows"]}
            for c in cmp.get("counted") or []:
                w = wall.get((c["model"], c["backend"], c["target"]))
                log.append({"part": "flow", "trial": t, "variant": variant,
                            "backend": backend_of(c), "counted_verdict": c["verdict"],
                            "instructions_pct": c.get("instructions_pct"),
                            "bytes_moved_pct": c.get("bytes_moved_pct"),
                            "wall_verdict": w["verdict"] if w else "none (emulated)",
                            "wall_ratio": w["ratio"] if w else None,
                            "compare_exit": code})  # fmt: skip
        out.write_text(json.dumps(doc, indent=1))


def _pct(x: float | None) -> str:
    return "-" if x is None else f"{x:+.3f}%"


def _tally(rows: list[dict], key: str) -> str:
    out: dict[str, int] = {}
    for r in rows:
        out[r[key]] = out.get(r[key], 0) + 1
    return ", ".join(f"{v} {k}" for k, v in sorted(out.items()))


def summarize(rows: list[dict]) -> str:
    """The Markdown tables of benchmarks/counted.md from the rows of one or more runs."""
    lines = ["### Spread of counts across processes", "",
             "| model | backend | processes | instructions / inference (min .. max) | spread | "
             "bytes moved / inference | counted run s (median) |", "|---|---|---|---|---|---|---|"]  # fmt: skip
    spread_rows = [r for r in rows if r["part"] == "spread" and r.get("instructions")]
    for model in SPREAD_MODELS:
        for backend in BACKENDS:
            rs = [r for r in spread_rows if r["model"] == model and r["backend"] == backend]
            if not rs:
                continue
            ins = [r["instructions"] for r in rs]
            moved = [r["bytes_loaded"] + r["bytes_stored"] for r in rs]
            secs = sorted(r["counted_s"] for r in rs)
            lines.append(
                f"| {model} | {backend} | {len(rs)} | {min(ins):,.0f} .. {max(ins):,.0f} | "
                f"{(max(ins) - min(ins)) / min(ins) * 100:.4f}% | "
                f"{min(moved):,.0f} .. {max(moved):,.0f} | {secs[len(secs) // 2]:.1f} |"
            )
    errors = [r for r in rows if r["part"] == "spread" and r.get("error")]
    if errors:
        lines += ["", f"Counted errors: {len(errors)} ({errors[0]['error']})"]
    lines += ["", "### The flow: two separate `guard run --counted`, then `guard compare`", "",
              "| variant | backend | trials | counted verdicts | count change (min .. max) | "
              "wall-time verdicts | wall ratio (min .. max) |", "|---|---|---|---|---|---|---|"]  # fmt: skip
    flow_rows = [r for r in rows if r["part"] == "flow"]
    for variant in ("aa", *VARIANTS):
        for backend in BACKENDS:
            rs = [r for r in flow_rows if r["variant"] == variant and r["backend"] == backend]
            if not rs:
                continue

            pct = [r["instructions_pct"] for r in rs if r.get("instructions_pct") is not None]
            ratios = [r["wall_ratio"] for r in rs if r.get("wall_ratio") is not None]
            lines.append(
                f"| {variant} | {backend} | {len(rs)} | {_tally(rs, 'counted_verdict')} | "
                f"{_pct(min(pct) if pct else None)} .. {_pct(max(pct) if pct else None)} | "
                f"{_tally(rs, 'wall_verdict')} | "
                + (f"{min(ratios):.3f} .. {max(ratios):.3f} |" if ratios else "- |")
            )
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--spread-processes", type=int, default=10)
    ap.add_argument("--trials", type=int, default=10)
    ap.add_argument("--parts", default="flow,spread")
    ap.add_argument("--spread-models", default=",".join(SPREAD_MODELS))
    ap.add_argument("--spread-backends", default="onnxruntime,bundled-x86-64-v3,bundled-aarch64")
    ap.add_argument("--work", type=Path, default=None)
    ap.add_argument("--out", type=Path, default=Path("benchmarks/results/counted.json"))
    ap.add_argument("--summarize", type=Path, nargs="*", help="print the tables of these runs")
    args = ap.parse_args(argv)
    if args.summarize:
        rows = [r for p in args.summarize for r in json.loads(p.read_text())["rows"]]
        sys.stdout.write(summarize(rows))
        return 0
    work = args.work or Path(tempfile.mkdtemp(prefix="guard-counted-bench-"))
    work.mkdir(parents=True, exist_ok=True)
    log: list = []
    doc = {"host": {"machine": platform.machine(), "cpus": os.cpu_count(),
                    "loadavg_start": os.getloadavg()},
           "command": " ".join([Path(sys.argv[0]).name, *(argv or sys.argv[1:])]),
           "rows": log}  # fmt: skip
    args.out.parent.mkdir(parents=True, exist_ok=True)
    parts = args.parts.split(",")
    if "flow" in parts:
        flow(work, args.trials, log, args.out, doc)
    if "spread" in parts:
        spread(work, args.spread_processes, log, args.spread_models.split(","),
               args.spread_backends.split(","))  # fmt: skip
    doc["host"]["loadavg_end"] = os.getloadavg()
    args.out.write_text(json.dumps(doc, indent=1))
    print(args.out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
