"""The convolutions of real models, per layer, against the same-run sgemm of their x86 class.

For each target class (``--targets``: ``host``, the host's own code, AVX-512 on an AVX-512
host; ``avx2``, ``-mcpu=x86-64-v3``: 16 ymm registers, 8 float lanes) every convolution
step of the models (``--models``) that is one of

- large: at least ``--min-mflop`` (50) MFLOP (the 3x3 and 1x1 layers of resnet50, vgg19,
  inception_v2, densenet121; the large-kernel first layers: the 7x7/2 3->64 stems,
  alexnet's 11x11/4, zfnet512's 7x7/2);
- a first layer (at most 4 input channels), whatever its FLOPs;
- depthwise or grouped (shufflenet, mobilenet_v2, ppocr_v4_det/rec, nudenet_320n) of at
  least ``--min-mflop-thin`` (2) MFLOP,

is taken whole (not cut into the thread pool's tasks) from the model's own bundled plan
for that target: its layout (NCHW<L>c, NCHW for a stem, NHWC where the plan keeps it),
its fused epilogue, its packed weights. Layers of one shape are measured once (``x``:
how many steps share it). Each is compiled alone by the tuner's harness
(guard.compiler.tuning.tune: the emitter's code at O3 for that target) with the default
schedule, and every compile happens before the timing starts. The timing (``--lock``:
under that flock, taken only for the timing) runs each layer on one thread by the
thread's CPU time, interleaved in rounds with onnxruntime running the same convolution
alone (a one-node ONNX model in NCHW, one intra-op thread, no epilogue) and with a copy
of as many bytes as the layer moves.

The references: OpenBLAS's sgemm 1024^3 on one thread, in a child process, timed by the
thread's CPU time, with the library's own kernels for ``host`` and its AVX2 kernels
(``OPENBLAS_CORETYPE=Haswell``) for ``avx2``, measured before and after each class's
layers. A depthwise or grouped layer does few FLOPs per byte, so it is also held to the
memory roofline: ``of copy`` is the time of a numpy copy that reads and writes as many
bytes as the layer reads (input, packed weights) and writes (output), each once, at the
same size, over the layer's time (1.0: the layer runs at the copy's speed).

    .venv/bin/python benchmarks/conv_layers.py --lock /tmp/bench.lock

writes benchmarks/results/conv_layers_<llvm cpu>.md and .json (``--out``). Needs an x86-64
host that runs the targets' code.
"""

from __future__ import annotations

import argparse
import contextlib
import fcntl
import json
import os
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).parent))

import test_backends_vs_onnxruntime as bench  # noqa: E402

from guard import zoo  # noqa: E402
from guard.compiler.codegen.llvm_target import codegen_target, runnable_here  # noqa: E402
from guard.compiler.tuning.tune import Compiled, extract_tasks, measure  # noqa: E402
from guard.manifest import canonicalize  # noqa: E402

MODELS = (
    "resnet50", "vgg19", "inception_v2", "densenet121", "alexnet", "zfnet512", "shufflenet",
    "mobilenet_v2", "ppocr_v4_det", "ppocr_v4_rec", "nudenet_320n",
)  # fmt: skip
TARGETS = {"host": "host", "avx2": bench.AVX2}
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


def sgemm(cls: str, n: int = 1024, reps: int = 7) -> float:
    """OpenBLAS's sgemm, one thread, timed by the thread's CPU time as the layers are (a
    child: the core type is read when the library loads); AVX2 kernels for ``avx2``."""
    env = {**os.environ, "OPENBLAS_NUM_THREADS": "1"}
    env.pop("OPENBLAS_CORETYPE", None)
    if cls == "avx2":
        env["OPENBLAS_CORETYPE"] = "Haswell"
    out = subprocess.run(
        [sys.executable, "-c", _SGEMM, str(n), str(reps)],
        env=env, capture_output=True, text=True, check=True,
    )  # fmt: skip
    return float(out.stdout.strip().splitlines()[-1])


def _shapes(name: str) -> dict:
    if name in bench.REAL:
        return dict(bench.REAL[name][2])
    d = zoo.describe(name)
    return {k: [1 if isinstance(x, str) else x for x in v] for k, v in d["inputs"].items()}


def kind(g: Any) -> str:
    if g.mode == "depthwise":
        return "depthwise"
    if g.g > 1:
        return "grouped"
    return "first" if g.C <= 4 else "dense"


def layers(name: str, target: str, min_flops: float, min_thin: float) -> list:
    """The model's convolution steps this benchmark covers (module docstring), one per shape."""
    path = bench.model_file(name)
    tasks = extract_tasks(path, _shapes(name), target, "bench", whole=True)
    out = []
    for t in tasks:
        if t.key.op != "conv":
            continue
        k = kind(t.shape)
        thin = k in ("depthwise", "grouped")
        if k == "first" or t.flops >= (min_thin if thin else min_flops):
            out.append(t)
    return out


def label(g: Any) -> str:
    grp = f" g{g.g}" if g.g > 1 else ""
    return (
        f"{g.R}x{g.S}{'/' + str(g.sh) if g.sh > 1 else ''} {g.C}->{g.K}{grp} @{g.OH}x{g.OW}"
        f" ({g.layout})"
    )


def moved_bytes(g: Any) -> int:
    """Bytes a convolution must read (input, weights) and write (output), each once."""
    return 4 * (g.N * g.C * g.H * g.W + g.K * g.Cg * g.R * g.S + g.N * g.K * g.OH * g.OW)


class OrtConv:
    """The same convolution alone in onnxruntime (NCHW, one thread, no epilogue)."""

    compile_s = 0.0

    def __init__(self, g: Any, tmp: Path) -> None:
        import onnx
        import onnxruntime as ort
        from onnx import TensorProto, helper, numpy_helper

        rng = np.random.default_rng(0)
        w = rng.standard_normal((g.K, g.Cg, g.R, g.S)).astype(np.float32)
        node = helper.make_node(
            "Conv", ["x", "w"], ["y"], group=g.g, strides=[g.sh, g.sw],
            dilations=[g.dh, g.dw], pads=[g.pt, g.pl, g.pb, g.pr], kernel_shape=[g.R, g.S],
        )  # fmt: skip
        graph = helper.make_graph(
            [node], "conv",
            [helper.make_tensor_value_info("x", TensorProto.FLOAT, [g.N, g.C, g.H, g.W])],
            [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
            [numpy_helper.from_array(w, "w")],
        )  # fmt: skip
        model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
        path = tmp / "conv.onnx"
        onnx.save(model, str(path))
        so = ort.SessionOptions()
        so.intra_op_num_threads = 1
        so.inter_op_num_threads = 1
        so.execution_mode = ort.ExecutionMode.ORT_SEQUENTIAL
        self.sess = ort.InferenceSession(str(path), so, providers=["CPUExecutionProvider"])
        self.feed = {"x": rng.standard_normal((g.N, g.C, g.H, g.W)).astype(np.float32)}

    def call(self, times: int) -> None:
        for _ in range(times):
            self.sess.run(None, self.feed)


class Copy:
    """A numpy copy that reads and writes ``nbytes`` in all (half each way)."""

    compile_s = 0.0

    def __init__(self, nbytes: int) -> None:
        n = max(16, nbytes // 8)
        self.src = np.random.default_rng(0).standard_normal(n).astype(np.float32)
        self.dst = np.empty_like(self.src)

    def call(self, times: int) -> None:
        for _ in range(times):
            np.copyto(self.dst, self.src)


@contextlib.contextmanager
def locked(path: str | None) -> Iterator[None]:
    if not path:
        yield
        return
    with open(path, "a") as f:
        fcntl.flock(f, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(f, fcntl.LOCK_UN)


def run_class(cls: str, args: argparse.Namespace, tmp: Path) -> dict:
    """Compile every layer of one class, then time them under the lock."""
    target = canonicalize(TARGETS[cls])
    tgt = codegen_target(target)
    why = runnable_here(tgt)
    if why:
        raise SystemExit(f"{cls} code does not run here: {why}")
    todo, seen = [], set()
    for name in args.models.split(","):
        for t in layers(name, target, args.min_mflop * 1e6, args.min_mflop_thin * 1e6):
            if t.key.text in seen:
                continue
            seen.add(t.key.text)
            sides: dict[str, Any] = {"ours": Compiled(t, t.default, tgt, np.random.default_rng(0))}
            if args.ort:
                d = tmp / f"{cls}{len(todo)}"
                d.mkdir()
                sides["ort"] = OrtConv(t.shape, d)
            if kind(t.shape) in ("depthwise", "grouped"):
                sides["copy"] = Copy(moved_bytes(t.shape))
            todo.append((name, t, sides))
    print(f"{cls}: {len(todo)} layers compiled; timing", flush=True)
    rows = []
    with locked(args.lock):
        load0 = open("/proc/loadavg").read().split()[:3]
        ref0 = sgemm(cls)
        share = bench.CpuShare()  # while the layers run (the sgemm child is not counted)
        share.start()
        for name, t, sides in todo:
            built = {k: c for k, c in sides.items()}
            res = measure(
                t, list(built), tgt, reps=args.reps, timer=time.thread_time,
                compile_one=lambda _t, k, _g, _r, b=built: b[k],
            )  # fmt: skip
            sec = {m.schedule: m.median for m in res}
            g = t.shape
            row = {
                "model": name, "layer": label(g), "kind": kind(g), "count": t.count,
                "mflop": round(t.flops / 1e6, 2),
                "tile": f"{t.default.ow_block} x {t.default.oc_block}",
                "us": round(sec["ours"] * 1e6, 1),
                "gflops": round(t.flops / sec["ours"] / 1e9, 1),
            }  # fmt: skip
            if "ort" in sec:
                row["ort_us"] = round(sec["ort"] * 1e6, 1)
                row["ort_gflops"] = round(t.flops / sec["ort"] / 1e9, 1)
            if "copy" in sec:
                row["mbytes"] = round(moved_bytes(g) / 1e6, 2)
                row["of_copy"] = round(sec["copy"] / sec["ours"], 3)
            rows.append(row)
            print(f"{cls} {name:13s} {row['layer']:36s} {row['gflops']:6.1f} GFLOP/s", flush=True)
        others = share.stop()
        ref1 = sgemm(cls)
        load1 = open("/proc/loadavg").read().split()[:3]
    ref = (ref0 + ref1) / 2
    for r in rows:
        r["of_sgemm"] = round(r["gflops"] / ref, 3)
        if "ort_gflops" in r:
            r["ort_of_sgemm"] = round(r["ort_gflops"] / ref, 3)
    return {
        "class": cls, "target": target, "sgemm_gflops": [round(ref0, 1), round(ref1, 1)],
        "loadavg": [load0, load1], "others_cpu": round(others, 3), "rows": rows,
    }  # fmt: skip


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--targets", default="host,avx2", help="comma-separated: host, avx2")
    ap.add_argument("--models", default=",".join(MODELS))
    ap.add_argument("--min-mflop", type=float, default=50.0)
    ap.add_argument("--min-mflop-thin", type=float, default=2.0)
    ap.add_argument("--reps", type=int, default=9)
    ap.add_argument("--no-ort", dest="ort", action="store_false")
    ap.add_argument("--lock", default=None, help="flock this file for the timing only")
    ap.add_argument("--out", type=Path, default=None)
    args = ap.parse_args(argv)
    host = bench.host_class()
    classes = []
    with tempfile.TemporaryDirectory() as tmp:
        for cls in args.targets.split(","):
            classes.append(run_class(cls, args, Path(tmp)))
    doc = {
        "host": host, "models": args.models.split(","), "min_mflop": args.min_mflop,
        "min_mflop_thin": args.min_mflop_thin, "reps": args.reps, "classes": classes,
        "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
    }  # fmt: skip
    out = args.out or RESULTS / f"conv_layers_{host['llvm_cpu']}.json"
    out.write_text(json.dumps(doc, indent=1) + "\n")
    out.with_suffix(".md").write_text(table(doc))
    print(table(doc))
    return 0


def table(doc: dict) -> str:
    h = doc["host"]
    lines = [
        f"Host: {h['cpu_model']}, LLVM cpu {h['llvm_cpu']} ({h['isa']}, {h['vector_width']} "
        f"float lanes), {h['cpus']} CPUs; {doc['date']}; {doc['reps']} interleaved rounds.",
        "",
    ]
    for c in doc["classes"]:
        rows = c["rows"]
        ref0, ref1 = c["sgemm_gflops"]
        lines += [
            f"### {c['class']}: {c['target']}",
            "",
            f"sgemm (OpenBLAS, 1 thread, 1024^3, thread CPU time"
            f"{', OPENBLAS_CORETYPE=Haswell' if c['class'] == 'avx2' else ''}) before / after: "
            f"{ref0} / {ref1} GFLOP/s. Load average before / after: {' '.join(c['loadavg'][0])}"
            f" / {' '.join(c['loadavg'][1])}; other processes' share of the CPU while "
            f"timing: {'%.0f%%' % (100 * c['others_cpu']) if 'others_cpu' in c else 'not measured'}.",
            "",
            "| model | layer (first model using it) | kind | x | MFLOP | tile | us | GFLOP/s "
            "| of sgemm | ort us | ort GFLOP/s | MB moved | of copy |",
            "|---|---|---|---:|---:|---|---:|---:|---:|---:|---:|---:|---:|",
        ]
        for r in rows:
            lines.append(
                f"| {r['model']} | {r['layer']} | {r['kind']} | {r['count']} | {r['mflop']} "
                f"| {r['tile']} | {r['us']} | {r['gflops']} | {r['of_sgemm']:.2f} "
                f"| {r.get('ort_us', '')} | {r.get('ort_gflops', '')} | {r.get('mbytes', '')} "
                f"| {r.get('of_copy', '')} |"
            )
        lines += ["", summary(rows), ""]
    return "\n".join(lines)


def summary(rows: list[dict]) -> str:
    parts = []
    for k in ("dense", "first", "grouped", "depthwise"):
        sel = [r for r in rows if r["kind"] == k]
        if not sel:
            continue
        share = [r["of_sgemm"] for r in sel]
        w = [r["mflop"] * r["count"] for r in sel]
        s = (
            f"{k} {len(sel)} layers: of sgemm min {min(share):.2f}, median "
            f"{float(np.median(share)):.2f}, FLOP-weighted {float(np.average(share, weights=w)):.2f}"
            f", under 0.9: {sum(x < 0.9 for x in share)}"
        )
        cp = [r["of_copy"] for r in sel if "of_copy" in r]
        if cp:
            s += f"; of copy min {min(cp):.2f}, median {float(np.median(cp)):.2f}"
        ort = [r["us"] / r["ort_us"] for r in sel if r.get("ort_us")]
        if ort:
            s += f"; time / ort's geomean {float(np.exp(np.mean(np.log(ort)))):.2f}"
        parts.append(s)
    return ". ".join(parts) + "."


if __name__ == "__main__":
    raise SystemExit(main())
