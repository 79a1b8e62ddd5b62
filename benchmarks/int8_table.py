"""int8 table: bundled int8 against onnxruntime int8, OpenVINO int8 and bundled fp32.

    python benchmarks/int8_table.py [--models a,b] [--rounds 9] [--out benchmarks/results]

Models (issue 38, must-have 4): four light topologies of guard's zoo (ShuffleNet,
DenseNet-121, Inception-v2, ZFNet-512) converted to opset 13 and quantised with
onnxruntime's ``quantize_static`` (QDQ, per-channel s8 weights, u8 activations,
calibration on four seeded inputs), two real-weight models from the rapidocr-onnxruntime
wheel quantised the same way, and guard's zoo transformer quantised with
``quantize_dynamic`` (MatMulInteger / DynamicQuantizeLinear). Every backend's sessions
for a model run interleaved in this one process (rounds alternate A B C D A B C D ...),
at 1 and at 2 threads; the table gives the medians, bundled int8 / min(onnxruntime int8,
OpenVINO int8), bundled int8 / bundled fp32, the int8 GOPS (2 x the integer MACs of the
QLinear/Integer nodes over the median) against a same-run VNNI peak (a JIT'd loop of
independent ``vpdpbusd``, 1 thread), and the CPU share other processes took meanwhile.

It checks what it times: the bundled int8 build is one native partition (or says how
many), its 1- and 2-thread outputs are bit-identical, the host build and the AVX2
(``-mcpu=x86-64-v3``) build give identical outputs, and the deviation from onnxruntime's
int8 (as a share of the output range) is reported beside onnxruntime's own (its
optimised vs its unoptimised session). It names the CPU class (``lscpu``'s model name,
LLVM's CPU name, the int8 capability and the features that decide it).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import onnx

from guard.backends import get_backend
from guard.backends.base import BuildRequest
from guard.manifest import canonicalize

LIGHT = ("shufflenet", "densenet121", "inception_v2", "zfnet512")
REAL = {
    "ppocr_cls": ("rapidocr_onnxruntime", "models/ch_ppocr_mobile_v2.0_cls_infer.onnx",
                  [1, 3, 48, 192]),
    "ppocr_v4_det": ("rapidocr_onnxruntime", "models/ch_PP-OCRv4_det_infer.onnx",
                     [1, 3, 320, 320]),
}  # fmt: skip
DYNAMIC = ("transformer",)
AVX2 = "llvm -mcpu=x86-64-v3 -mtriple=x86_64-linux-gnu"


def fp32_model(name: str, work: Path) -> tuple[Path, dict[str, list[int]]]:
    """The float model at opset >= 13 with fixed input shapes."""
    if name in REAL:
        from guard.zoo.wheels import wheel_model

        src, why = wheel_model(*REAL[name][:2])
        if src is None:
            raise SystemExit(why)
        m = onnx.load(str(src))
        shapes = {m.graph.input[0].name: list(REAL[name][2])}
    else:
        from guard import zoo

        m = onnx.load(str(zoo.model_path(name)))
        d = zoo.describe(name)
        shapes = {
            k: [1 if isinstance(x, str) else int(x) for x in v] for k, v in d["inputs"].items()
        }
    opset = max((o.version for o in m.opset_import if o.domain in ("", "ai.onnx")), default=13)
    if opset < 13:
        m = onnx.version_converter.convert_version(m, 13)
    for inp in m.graph.input:  # fixed shapes: the quantiser and every runtime see the same
        if inp.name in shapes:
            for dim, v in zip(inp.type.tensor_type.shape.dim, shapes[inp.name], strict=False):
                dim.ClearField("dim_param")
                dim.dim_value = v
    path = work / f"{name}-fp32.onnx"
    onnx.save(m, str(path))
    return path, shapes


def feeds_for(shapes: dict[str, list[int]], seed: int) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(seed)
    return {k: rng.standard_normal(v).astype(np.float32) for k, v in shapes.items()}


def int8_model(name: str, f32: Path, shapes: dict[str, list[int]], work: Path) -> Path:
    from onnxruntime.quantization import (
        CalibrationDataReader,
        QuantFormat,
        QuantType,
        quantize_dynamic,
        quantize_static,
    )

    out = work / f"{name}-int8.onnx"
    if name in DYNAMIC:
        quantize_dynamic(str(f32), str(out), weight_type=QuantType.QInt8)
        return out

    class Reader(CalibrationDataReader):
        def __init__(self) -> None:
            self.it = iter([feeds_for(shapes, s) for s in range(4)])

        def get_next(self):  # type: ignore[no-untyped-def]
            return next(self.it, None)

    quantize_static(
        str(f32), str(out), Reader(), quant_format=QuantFormat.QDQ, per_channel=True,
        activation_type=QuantType.QUInt8, weight_type=QuantType.QInt8,
    )  # fmt: skip
    return out


def bundled(path: Path, shapes: dict, out: Path, threads: tuple[int, ...], target: str = "host"):
    be = get_backend("bundled")
    out.mkdir(parents=True, exist_ok=True)
    be.build(BuildRequest(model_path=path, input_shapes={k: tuple(v) for k, v in shapes.items()},
                          target_raw=target, target_canonical=canonicalize(target), threads=1,
                          out_dir=out))  # fmt: skip
    return {n: be.load(out, n) for n in threads}


class Ort:
    def __init__(self, path: Path, threads: int, optimised: bool = True) -> None:
        import onnxruntime as ort

        so = ort.SessionOptions()
        so.intra_op_num_threads = threads
        so.inter_op_num_threads = 1
        if not optimised:
            so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
        self.s = ort.InferenceSession(str(path), so, providers=["CPUExecutionProvider"])

    def run(self, feeds):  # type: ignore[no-untyped-def]
        return self.s.run(None, feeds)


class OpenVino:
    def __init__(self, path: Path, shapes: dict, threads: int) -> None:
        import openvino as ov

        core = ov.Core()
        m = core.read_model(str(path))
        m.reshape({k: v for k, v in shapes.items()})
        cfg = {"INFERENCE_NUM_THREADS": threads, "PERFORMANCE_HINT": "LATENCY",
               "NUM_STREAMS": 1, "INFERENCE_PRECISION_HINT": "f32"}  # fmt: skip
        self.c = core.compile_model(m, "CPU", cfg)
        self.r = self.c.create_infer_request()

    def run(self, feeds):  # type: ignore[no-untyped-def]
        res = self.r.infer(feeds)
        return [np.asarray(v) for v in res.values()]


_OV_PROBE = """
import sys, json, numpy as np
from int8_table import OpenVino
shapes = json.loads(sys.argv[2])
s = OpenVino(sys.argv[1], shapes, 1)
s.run({k: np.zeros(v, np.float32) for k, v in shapes.items()})
"""


def openvino_fails(path: Path, shapes: dict) -> str | None:
    """Why OpenVINO cannot run this model (its compile raised, or it crashed the process:
    2026.4.1 segfaults compiling QDQ DenseNet-121 on znver4), or None. Probed in a child so
    a crash costs the column, not the table."""
    r = subprocess.run(
        [sys.executable, "-c", _OV_PROBE, str(path), json.dumps(shapes)],
        capture_output=True, text=True, cwd=Path(__file__).parent, timeout=900,
    )  # fmt: skip
    if r.returncode == 0:
        return None
    if r.returncode < 0:
        return f"crashed (signal {-r.returncode}) compiling or running the model"
    lines = [ln.strip() for ln in r.stderr.splitlines() if ln.strip()]
    # OpenVINO's message is a chain of "Exception from <file>:<line>:" frames, the cause last
    causes = [ln for ln in lines if not ln.startswith(("Exception from", "Traceback", "File "))]
    why = (causes or lines or [f"exit {r.returncode}"])[-1]
    where = next((ln.split("]")[0] + "]" for ln in lines if "CALLBACK HAS THROWN" in ln), "")
    return f"{where} {why}".strip()[:200]


def int8_macs(path: Path) -> int:
    """Integer MACs of the int8 graph's compute nodes, after guard's import and fold."""
    from guard.compiler import import_onnx, optimize

    g, _ = optimize(import_onnx(path, {}), "O2")
    total = 0
    for n in g.nodes:
        if n.op in ("QLinearConv", "ConvInteger"):
            w = g.values[n.inputs[3 if n.op == "QLinearConv" else 1]].shape
            total += g.values[n.outputs[0]].size * int(np.prod(w[1:]))
        elif n.op in ("QLinearMatMul", "MatMulInteger"):
            total += g.values[n.outputs[0]].size * g.values[n.inputs[0]].shape[-1]
    return total


def vnni_peak_gops(seconds: float = 0.3) -> float:
    """1-thread int8 peak: 12 independent ``vpdpbusd`` chains (zmm on VNNI, else the
    host's int8 dot step via guard's DotClass) in a JIT'd loop."""
    import ctypes

    import llvmlite.binding as llvm
    import llvmlite.ir as ir

    from guard.compiler.codegen.irutil import I64
    from guard.compiler.codegen.llvm_target import host_target
    from guard.compiler.codegen.quant.dot import DotClass, iconst, ivec

    h = host_target()
    dot = DotClass(h.int_dot, h.vector_width)
    W = dot.width
    mod = ir.Module("peak")
    fn = ir.Function(mod, ir.FunctionType(ir.IntType(32), [I64]), "peak")
    b = ir.IRBuilder(fn.append_basic_block("e"))
    from guard.compiler.codegen.irutil import for_loop_dynamic

    seeds = [iconst(W, 0x01020304 + i) for i in range(4)]
    u = dot.prep_u(b, seeds[0])
    s = dot.prep_s(b, [seeds[1]] * dot.s_words)
    acc = for_loop_dynamic(
        b, fn.args[0], [iconst(W, i) for i in range(12)],
        lambda i, a: [dot.dot(b, x, u, s) for x in a],
    )  # fmt: skip
    tot = acc[0]
    for x in acc[1:]:
        tot = b.xor(tot, x)
    b.ret(b.extract_element(tot, ir.Constant(ir.IntType(32), 0)))
    tm = h.target_machine()
    mod.triple = h.triple
    m = llvm.parse_assembly(str(mod))
    pto = llvm.create_pipeline_tuning_options(speed_level=3)
    pb = llvm.create_pass_builder(tm, pto)
    pb.getModulePassManager().run(m, pb)
    eng = llvm.create_mcjit_compiler(m, tm)
    eng.finalize_object()
    f = ctypes.CFUNCTYPE(ctypes.c_int32, ctypes.c_int64)(eng.get_function_address("peak"))
    n = 1 << 16
    f(n)
    best = 0.0
    t_end = time.perf_counter() + seconds
    while time.perf_counter() < t_end:
        t0 = time.perf_counter()
        f(n)
        dt = time.perf_counter() - t0
        best = max(best, 12 * 4 * W * 2 * n / dt / 1e9)
    _ = ivec
    return best


class CpuShare:
    """Other processes' share of the machine's CPU between start() and stop()."""

    @staticmethod
    def _busy() -> float:
        with open("/proc/stat") as f:
            vals = [float(v) for v in f.readline().split()[1:]]
        return sum(vals) - vals[3] - vals[4]

    def start(self) -> None:
        self.t0, self.b0, self.o0 = time.perf_counter(), self._busy(), sum(os.times()[:2])

    def stop(self) -> float:
        wall = time.perf_counter() - self.t0
        busy = (self._busy() - self.b0) / os.sysconf("SC_CLK_TCK")
        own = sum(os.times()[:2]) - self.o0
        return max(0.0, busy - own) / (wall * (os.cpu_count() or 1))


def median_of(fn, n: int) -> float:  # type: ignore[no-untyped-def]
    ts = []
    for _ in range(n):
        t0 = time.perf_counter()
        fn()
        ts.append(time.perf_counter() - t0)
    return float(np.median(ts))


def interleaved(sessions: dict, feeds: dict, rounds: int) -> tuple[dict, float]:
    for s in sessions.values():
        s.run(feeds)
        s.run(feeds)
    one = max(median_of(lambda s=s: s.run(feeds), 3) for s in sessions.values())
    per = max(3, min(100, int(0.1 / max(one, 1e-6))))
    times: dict[str, list[float]] = {k: [] for k in sessions}
    share = CpuShare()
    share.start()
    for _ in range(rounds):
        for k, s in sessions.items():
            times[k].append(median_of(lambda s=s: s.run(feeds), per))
    return {k: float(np.median(v)) for k, v in times.items()}, share.stop()


def deviation(a: list, b: list) -> float:
    """max |a - b| over the output range of ``b`` (float outputs)."""
    out = 0.0
    for x, y in zip(a, b, strict=True):
        x, y = np.asarray(x, np.float64), np.asarray(y, np.float64)
        rng = float(y.max() - y.min()) or 1.0
        out = max(out, float(np.abs(x - y).max()) / rng)
    return out


def cpu_class() -> dict:
    from guard.compiler.codegen.llvm_target import host_target
    from guard.compiler.ir.isa_table import INT_DOT_FEATURES

    h = host_target()
    model = ""
    try:
        lscpu = subprocess.run(["lscpu"], capture_output=True, text=True, check=True).stdout
        model = next((ln.split(":", 1)[1].strip() for ln in lscpu.splitlines()
                      if ln.startswith("Model name")), "")  # fmt: skip
    except (OSError, subprocess.CalledProcessError):
        pass
    return {
        "model_name": model, "llvm_cpu": h.cpu, "isa": h.isa, "int_dot": h.int_dot,
        "int_dot_features": [f for f in h.features
                             if f.lstrip("+") in sum(INT_DOT_FEATURES.values(), ())],
        "cpus": os.cpu_count(),
    }  # fmt: skip


def run_model(name: str, work: Path, rounds: int) -> dict:
    f32, shapes = fp32_model(name, work)
    q8 = int8_model(name, f32, shapes, work)
    feeds = feeds_for(shapes, 11)
    row: dict = {"model": name, "int8_macs": int8_macs(q8)}
    b8 = bundled(q8, shapes, work / f"{name}-b8", (1, 2))
    b8_avx2 = bundled(q8, shapes, work / f"{name}-b8avx2", (1,), AVX2)
    b32 = bundled(f32, shapes, work / f"{name}-b32", (1, 2))
    parts = b8[1].partitions()
    outs1, outs2 = b8[1].run(feeds), b8[2].run(feeds)
    avx2_out = b8_avx2[1].run(feeds)
    ort_opt, ort_raw = Ort(q8, 1).run(feeds), Ort(q8, 1, optimised=False).run(feeds)
    row["checks"] = {
        "partitions": parts.count, "native_nodes": parts.delegated_nodes,
        "cpu_nodes": parts.fallback_nodes,
        "bit_identical_1t_2t": all(np.array_equal(a, b) for a, b in zip(outs1, outs2, strict=True)),
        "host_equals_avx2": all(np.array_equal(a, b) for a, b in zip(outs1, avx2_out, strict=True)),
        "dev_vs_ort_opt": deviation(outs1, ort_opt), "dev_vs_ort_unopt": deviation(outs1, ort_raw),
        "ort_opt_vs_unopt": deviation(ort_opt, ort_raw),
    }  # fmt: skip
    ov_fails = openvino_fails(q8, shapes)
    if ov_fails:
        row["openvino_fails"] = ov_fails
    for n in (1, 2):
        sessions = {"bundled_int8": b8[n], "ort_int8": Ort(q8, n), "bundled_fp32": b32[n]}
        if not ov_fails:
            sessions["openvino_int8"] = OpenVino(q8, shapes, n)
        med, share = interleaved(sessions, feeds, rounds)
        best_peer = min(v for k, v in med.items() if k in ("ort_int8", "openvino_int8"))
        row[f"t{n}"] = {
            "ms": {k: round(v * 1e3, 3) for k, v in med.items()},
            "int8_vs_best_peer": med["bundled_int8"] / best_peer,
            "int8_vs_fp32": med["bundled_int8"] / med["bundled_fp32"],
            "int8_gops": 2 * row["int8_macs"] / med["bundled_int8"] / 1e9,
            "other_cpu_share": round(share, 3),
        }
    return row


def geomean(v: list[float]) -> float:
    return float(np.exp(np.mean(np.log(v)))) if v else float("nan")


def table(rows: list[dict], peak: float, cls: dict, cmd: str) -> str:
    lines = [
        "# int8: bundled vs onnxruntime int8 vs OpenVINO int8 vs bundled fp32",
        "",
        f"CPU: {cls['model_name']} (LLVM `{cls['llvm_cpu']}`, {cls['isa']}, int8 dot product "
        f"`{cls['int_dot']}` from {', '.join(cls['int_dot_features']) or 'no'} features), "
        f"{cls['cpus']} vCPUs, shared with other sessions (the other-CPU column).",
        f"Same-run int8 peak (1 thread, independent dot steps): {peak:.0f} GOPS.",
        f"Command: `{cmd}`",
        "",
        "| model | thr | bundled int8 ms | ort int8 ms | OpenVINO int8 ms | bundled fp32 ms | "
        "int8 / min(peers) | int8 / fp32 | int8 GOPS (% peak) | other CPU | partitions | "
        "1t=2t | host=avx2 | dev vs ort (ort opt vs unopt) |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        c = r["checks"]
        for n in (1, 2):
            t = r[f"t{n}"]
            ms = t["ms"]
            ov = f"{ms['openvino_int8']:.2f}" if "openvino_int8" in ms else "fails¹"
            lines.append(
                f"| {r['model']} | {n} | {ms['bundled_int8']:.2f} | {ms['ort_int8']:.2f} | "
                f"{ov} | {ms['bundled_fp32']:.2f} | "
                f"{t['int8_vs_best_peer']:.2f} | {t['int8_vs_fp32']:.2f} | "
                f"{t['int8_gops']:.0f} ({100 * t['int8_gops'] / peak / n:.0f}%) | "
                f"{t['other_cpu_share']:.2f} | {c['partitions']} | {c['bit_identical_1t_2t']} | "
                f"{c['host_equals_avx2']} | {c['dev_vs_ort_opt']:.3f} ({c['ort_opt_vs_unopt']:.3f}) |"
            )
    failed = [r for r in rows if r.get("openvino_fails")]
    if failed:
        lines.append(
            "\n¹ OpenVINO could not run the model (min(peers) is onnxruntime's): "
            + "; ".join(f"{r['model']}: {r['openvino_fails']}" for r in failed)
        )
    for n in (1, 2):
        g = geomean([r[f"t{n}"]["int8_vs_best_peer"] for r in rows])
        lines.append(f"\nGeomean bundled int8 / min(onnxruntime int8, OpenVINO int8) at {n} "
                     f"thread(s): {g:.2f}")  # fmt: skip
    return "\n".join(lines) + "\n"


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--models", default=",".join((*LIGHT, *REAL, *DYNAMIC)))
    ap.add_argument("--rounds", type=int, default=9)
    ap.add_argument("--out", default=str(Path(__file__).parent / "results"))
    args = ap.parse_args()
    cls = cpu_class()
    peak = vnni_peak_gops()
    rows = []
    cmd = "python benchmarks/int8_table.py " + " ".join(
        f"--{k} {v}" for k, v in vars(args).items() if k != "out"
    )
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    stem = f"int8_table_{cls['llvm_cpu']}"
    with tempfile.TemporaryDirectory() as tmp:
        for name in args.models.split(","):
            t0 = time.perf_counter()
            rows.append(run_model(name, Path(tmp), args.rounds))
            print(f"{name}: {json.dumps(rows[-1])} ({time.perf_counter() - t0:.0f} s)", flush=True)
            # written after every model: a run cut short keeps what it measured
            md = table(rows, peak, cls, cmd)
            (out / f"{stem}.md").write_text(md)
            data = {"cpu": cls, "peak_gops": peak, "rows": rows}
            (out / f"{stem}.json").write_text(json.dumps(data, indent=1) + "\n")
    print(md)


if __name__ == "__main__":
    main()
