"""The memory-budget ladder on five models, beside onnxruntime's arena (issue 35).

For each model: the bundled compiler's arena after every rung of the ladder (views,
memory-aware schedule, recompute, strip tiling, int8: the model quantised on 8 seeded
inputs by guard.quantize.fit_hook with the schedule and tiling re-applied, its error
against the fp32 build stated; spill), the
liveness lower bound of the unconstrained schedule, the smallest reachable arena, the
extra MACs and the latency each rung costs against the unconstrained build (every
distinct rung built and timed interleaved in this process, outputs compared), and
onnxruntime's arena on the same model (its CPU BFCArena growth, from the verbose log, as
guard's onnxruntime backend reads it). The budget asked of each model is a quarter of
its unconstrained arena, the issue's done-when.

    python benchmarks/memory_ladder.py [--models a,b] [--seconds 3] [--search 60]
        [--out benchmarks/results/memory_ladder.json]

Writes the JSON and a Markdown table next to it. The CPU is named in the output; timings
are interleaved in one process, so a co-tenant slows every rung alike, but report the
host's load with the numbers.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import time
from pathlib import Path
from typing import Any

import onnx

from guard.compiler import import_onnx, optimize, verify
from guard.compiler.codegen.llvm_target import codegen_target
from guard.compiler.fit.describe import tiled_stage_peaks
from guard.compiler.fit.ladder import climb
from guard.compiler.fit.measure import measure
from guard.compiler.partition.plan import plan
from guard.core.budget_bytes import fmt_bytes
from guard.quantize.fit_hook import quantise_hook
from guard.zoo.cache import model_path
from guard.zoo.wheels import wheel_model

# name -> (how to find it, input shapes)
MODELS: dict[str, tuple[tuple[str, ...], dict[str, tuple[int, ...]]]] = {
    "mobilenet_v2": (("zoo", "mobilenet_v2"), {}),
    "densenet121": (("zoo", "densenet121"), {}),
    "ppocr_v4_det_640": (
        ("wheel", "rapidocr_onnxruntime", "models/ch_PP-OCRv4_det_infer.onnx"),
        {"x": (1, 3, 640, 640)},
    ),
    "shufflenet": (("zoo", "shufflenet"), {}),
    "transformer": (("zoo", "transformer"), {}),
}


def locate(how: tuple[str, ...]) -> Path:
    if how[0] == "zoo":
        return model_path(how[1])
    path, why = wheel_model(how[1], how[2])
    if path is None:
        raise SystemExit(why)
    return path


def cpu_name() -> str:
    """/proc/cpuinfo's model name with LLVM's name for the host (its class: znver4, ...)."""
    import llvmlite.binding as llvm

    return f"{_model_name()} (LLVM host CPU: {llvm.get_host_cpu_name()})"


def _model_name() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown"


def ort_arena(path: Path, shapes: dict[str, tuple[int, ...]]) -> dict[str, Any]:
    """onnxruntime's arena and liveness lower bound (guard.backends.ort_memory's probe)."""
    from guard.backends.ort_memory import probe_memory

    model = onnx.load(str(path))
    bound = dict(shapes)
    for i in model.graph.input:
        if i.name not in bound:
            dims = i.type.tensor_type.shape.dim
            bound[i.name] = tuple(d.dim_value or 1 for d in dims)
    m = probe_memory(path, model, 1, "all", bound, ["CPUExecutionProvider"])
    return {"arena_bytes": m["arena_bytes"], "lower_bound_bytes": m["lower_bound_bytes"]}


def one(name: str, seconds: float, search_s: float) -> dict[str, Any]:
    how, shapes = MODELS[name]
    path = locate(how)
    graph = import_onnx(path, dict(shapes))
    optimised, _ = optimize(graph, "O2", target=codegen_target("host").table)
    verify(optimised)
    unconstrained = plan(optimised).arena_bytes
    budget = unconstrained // 4
    t = time.perf_counter()
    hook = quantise_hook(path, shapes, table=codegen_target("host").table)
    ladder = climb(optimised, budget, stop_at_fit=False, search_s=search_s, quantise=hook)
    search = time.perf_counter() - t
    tile = next((s for s in ladder.steps if s.name == "tile" and s.plan is not None), None)
    peaks = tiled_stage_peaks(ladder.steps[0].plan, tile.plan) if tile and tile.plan else None
    ladder = measure(ladder, seconds=seconds)
    return {
        "model": name,
        "inputs": {k: list(v) for k, v in shapes.items()},
        "unconstrained_arena_bytes": unconstrained,
        "search_wall_s": round(search, 2),
        "budget": ladder.to_dict(),
        # the tiled first stages' peak (live buffers over their steps), untiled and tiled
        "first_stages_peak_bytes": list(peaks) if peaks else None,
        "onnxruntime": ort_arena(path, shapes),
    }


def table(rows: list[dict[str, Any]]) -> str:
    out = [
        "| model | rung | arena | / lower bound | latency | extra MACs | max abs err | what |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        b = r["budget"]
        lb = b["unconstrained_lower_bound_bytes"]
        for s in b["ladder"]:
            arena, cost = s["arena_bytes"], s["latency_cost_pct"]
            cells = [
                r["model"],
                f"{s['rung']} {s['name']}",
                fmt_bytes(arena) if arena is not None else "-",
                f"{arena / lb:.2f}" if arena is not None else "-",
                f"{cost:+.1f}%" if cost is not None else "-",
                f"{s['extra_macs_pct']:.1f}%",
                _err(s),
                s["what"][:110],
            ]
            out.append("| " + " | ".join(cells) + " |")
        ort = r["onnxruntime"]
        out.append(
            f"| {r['model']} | **summary** | unconstrained "
            f"{fmt_bytes(r['unconstrained_arena_bytes'])}, budget {fmt_bytes(b['bytes'])} | "
            f"lower bound {fmt_bytes(lb)} | smallest reachable "
            f"{fmt_bytes(b['smallest_reachable_bytes'])} | "
            f"{'fits at rung ' + str(b['rung']) if b['fits'] else 'does not fit'} | "
            f"onnxruntime arena {fmt_bytes(ort['arena_bytes']) if ort['arena_bytes'] else '-'} "
            f"(its lower bound {fmt_bytes(ort['lower_bound_bytes'])}) | search "
            f"{r['search_wall_s']} s |"
        )
        if r["first_stages_peak_bytes"]:
            before, after = r["first_stages_peak_bytes"]
            out.append(
                f"| {r['model']} | **first stages** | peak {fmt_bytes(before)} -> "
                f"{fmt_bytes(after)} | {before / after:.2f}x smaller | | | | tiled stages only |"
            )
    return "\n".join(out)


def _err(s: dict[str, Any]) -> str:
    """The max abs error; an int8 rung's also relative to the fp32 range, and top-1."""
    err = s["max_abs_err"]
    if err is None:
        return "-"
    out = f"{err:.2g}"
    if s.get("quantised"):
        rel, top1 = s.get("max_rel_err"), s.get("top1_agreement")
        out += f" (int8: {rel:.2g} of range" if rel is not None else " (int8"
        out += f", top-1 {top1:.0%})" if top1 is not None else ")"
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--models", default=",".join(MODELS))
    ap.add_argument("--seconds", type=float, default=3.0, help="timing per model (interleaved)")
    ap.add_argument("--search", type=float, default=60.0, help="ladder search bound, seconds")
    ap.add_argument("--out", default="benchmarks/results/memory_ladder.json")
    args = ap.parse_args()
    rows = []
    load_before = os.getloadavg()
    for name in args.models.split(","):
        t = time.perf_counter()
        rows.append(one(name, args.seconds, args.search))
        print(f"{name}: {time.perf_counter() - t:.0f} s", flush=True)
    doc = {
        "cpu": cpu_name(),
        "cpus": os.cpu_count(),
        "loadavg_before": load_before,
        "loadavg_after": os.getloadavg(),
        "note": "shared machine: other processes ran during the timings (see loadavg); "
        "latency costs are medians of interleaved runs in one process",
        "rows": rows,
    }
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(doc, indent=1) + "\n")
    md = out.with_suffix(".md")
    md.write_text(
        f"# Memory ladder (issue 35)\n\nCPU: {doc['cpu']} ({doc['cpus']} vCPU); load average "
        f"{load_before[0]:.1f} before, {doc['loadavg_after'][0]:.1f} after (shared machine: "
        "latency costs are interleaved medians, noisy).\n\nBudget per model: a quarter of its "
        "unconstrained arena. Arena ratios are against the liveness lower bound of the "
        "unconstrained schedule.\n\n" + table(rows) + "\n"
    )
    print(md.read_text())


if __name__ == "__main__":
    main()
