"""The large convolutions of real models as AVX2-target code, against the AVX2 sgemm.

Every convolution layer of at least ``--min-mflop`` (50) MFLOP in resnet50, inception_v1,
inception_v2, densenet121 and squeezenet, each taken whole (not cut into the thread
pool's tasks) from the model's own bundled plan for ``-mcpu=x86-64-v3`` (16 ymm
registers, 8 float lanes): the layout the plan gives it (NCHW8c, NCHW for a stem), its
fused epilogue (ReLU, a residual add), its packed weights. Layers of one shape are
measured once. Each is compiled alone by the tuner's harness
(guard.compiler.tuning.tune: the emitter's code at O3 for that target) and timed on one
thread by the thread's CPU time, interleaved with the previous default tile (7 columns x
1 vector, before the 16-register row-cost model) in the same rounds. The reference is
OpenBLAS's sgemm 1024^3 with its AVX2 kernels (``OPENBLAS_CORETYPE=Haswell``, one
thread, in a child process, timed by the thread's CPU time too), measured before and
after the layers in the same run.

    .venv/bin/python benchmarks/conv_layers_avx2.py

writes benchmarks/results/conv_layers_avx2_<llvm cpu>.md and .json. Needs an x86-64 host
that runs AVX2 code.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).parent))

import test_backends_vs_onnxruntime as bench  # noqa: E402

from guard import zoo  # noqa: E402
from guard.compiler.codegen.conv.schedule import ConvSchedule  # noqa: E402
from guard.compiler.codegen.llvm_target import codegen_target, runnable_here  # noqa: E402
from guard.compiler.tuning.tune import extract_tasks, measure  # noqa: E402
from guard.manifest import canonicalize  # noqa: E402

MODELS = ("resnet50", "inception_v1", "inception_v2", "densenet121", "squeezenet")
RESULTS = Path(__file__).parent / "results"


_SGEMM = """
import sys, time, numpy as np
n, reps = int(sys.argv[1]), int(sys.argv[2])
a = np.random.default_rng(0).standard_normal((n, n)).astype(np.float32)
b = np.random.default_rng(1).standard_normal((n, n)).astype(np.float32)
a @ b
ts = []
for _ in range(reps):
    t0 = time.thread_time()
    a @ b
    ts.append(time.thread_time() - t0)
print(2 * n**3 / float(np.median(ts)) / 1e9)
"""


def sgemm_avx2(n: int = 1024, reps: int = 7) -> float:
    """OpenBLAS's sgemm with its AVX2 kernels, one thread, timed by the thread's CPU time
    as the layers are (a child: the core type is read when the library loads)."""
    env = {**os.environ, "OPENBLAS_CORETYPE": "Haswell", "OPENBLAS_NUM_THREADS": "1"}
    out = subprocess.run(
        [sys.executable, "-c", _SGEMM, str(n), str(reps)],
        env=env, capture_output=True, text=True, check=True,
    )  # fmt: skip
    return float(out.stdout.strip().splitlines()[-1])


def _shapes(name: str) -> dict:
    d = zoo.describe(name)
    return {k: [1 if isinstance(x, str) else x for x in v] for k, v in d["inputs"].items()}


def layers(name: str, target: str, min_flops: int) -> list:
    """The model's convolution steps of at least ``min_flops``, one per shape."""
    tasks = extract_tasks(zoo.model_path(name), _shapes(name), target, "bench", whole=True)
    return [t for t in tasks if t.key.op == "conv" and t.flops >= min_flops]


def _label(t) -> str:
    g = t.shape
    return (
        f"{g.R}x{g.S}{'/' + str(g.sh) if g.sh > 1 else ''} {g.C}->{g.K} @{g.OH}x{g.OW} ({g.layout})"
    )


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--min-mflop", type=float, default=50.0)
    ap.add_argument("--reps", type=int, default=15)
    ap.add_argument("--models", default=",".join(MODELS))
    ap.add_argument("--out", type=Path, default=None)
    args = ap.parse_args(argv)
    target = canonicalize(bench.AVX2)
    tgt = codegen_target(target)
    why = runnable_here(tgt)
    if why:
        print(f"AVX2 code does not run here: {why}", file=sys.stderr)
        return 2
    host = bench.host_class()
    load0 = open("/proc/loadavg").read().split()[:3]
    ref0 = sgemm_avx2()
    rows, seen = [], set()
    for name in args.models.split(","):
        for t in layers(name, target, int(args.min_mflop * 1e6)):
            if t.key.text in seen:
                continue
            seen.add(t.key.text)
            g = t.shape
            old = ConvSchedule(ow_block=min(7, g.OW))
            scheds = [t.default] + ([old] if old != t.default else [])
            res = measure(t, scheds, tgt, reps=args.reps, timer=time.thread_time)
            gf = [t.flops / m.median / 1e9 for m in res]
            rows.append(
                {
                    "model": name,
                    "layer": _label(t),
                    "count": t.count,
                    "mflop": round(t.flops / 1e6, 1),
                    "tile": f"{t.default.ow_block} x {t.default.oc_block}",
                    "gflops": round(gf[0], 1),
                    "gflops_7x1": round(gf[-1], 1),
                }
            )
            print(f"{name:13s} {rows[-1]['layer']:34s} {gf[0]:6.1f} GFLOP/s", flush=True)
    ref1 = sgemm_avx2()
    load1 = open("/proc/loadavg").read().split()[:3]
    ref = (ref0 + ref1) / 2
    for r in rows:
        r["of_sgemm"] = round(r["gflops"] / ref, 3)
        r["of_sgemm_7x1"] = round(r["gflops_7x1"] / ref, 3)
    doc = {
        "host": host,
        "target": target,
        "sgemm_avx2_gflops": [round(ref0, 1), round(ref1, 1)],
        "loadavg": [load0, load1],
        "min_mflop": args.min_mflop,
        "rows": rows,
    }
    stem = f"conv_layers_avx2_{host['llvm_cpu']}"
    out = args.out or RESULTS / f"{stem}.json"
    out.write_text(json.dumps(doc, indent=1) + "\n")
    out.with_suffix(".md").write_text(table(doc))
    print(table(doc))
    return 0


def table(doc: dict) -> str:
    h, rows = doc["host"], doc["rows"]
    ref0, ref1 = doc["sgemm_avx2_gflops"]
    share = [r["of_sgemm"] for r in rows]
    weights = [r["mflop"] * r["count"] for r in rows]
    lines = [
        f"Host: LLVM cpu {h['llvm_cpu']} ({h['isa']}, {h['vector_width']} float lanes), "
        f"{h['cpus']} CPUs; code for {doc['target']} (avx2, 8 float lanes, 16 registers).",
        f"AVX2 sgemm (OpenBLAS, OPENBLAS_CORETYPE=Haswell, 1 thread, 1024^3, thread CPU time) "
        "before / after: "
        f"{ref0} / {ref1} GFLOP/s. Load average before / after: {' '.join(doc['loadavg'][0])}"
        f" / {' '.join(doc['loadavg'][1])}.",
        "",
        "| model | layer (first model using it) | x | MFLOP | tile | GFLOP/s | of sgemm "
        "| 7 x 1 GFLOP/s | 7 x 1 of sgemm |",
        "|---|---|---:|---:|---|---:|---:|---:|---:|",
    ]
    for r in rows:
        lines.append(
            f"| {r['model']} | {r['layer']} | {r['count']} | {r['mflop']} | {r['tile']} "
            f"| {r['gflops']} | {r['of_sgemm']:.2f} | {r['gflops_7x1']} "
            f"| {r['of_sgemm_7x1']:.2f} |"
        )
    lines += [
        "",
        f"{len(rows)} layers of at least {doc['min_mflop']:g} MFLOP: share of the AVX2 sgemm "
        f"min {min(share):.2f}, median {float(np.median(share)):.2f}, FLOP-weighted "
        f"{float(np.average(share, weights=weights)):.2f}; layers under 0.8: "
        f"{sum(s < 0.8 for s in share)}.",
        "",
    ]
    return "\n".join(lines)


if __name__ == "__main__":
    raise SystemExit(main())
