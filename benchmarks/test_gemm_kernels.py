"""GFLOP/s of the generated GEMM and convolution kernels vs OpenBLAS and onnxruntime.

For each zoo-like shape, three sides are timed in the same process, interleaved (rounds
of ABC, the order rotating each round, so drift and a co-tenant hit all three):

- ``guard``: the kernel from guard/compiler/codegen (default schedule), JIT-compiled for
  the host at O3, called through ctypes with cached addresses; a convolution is the
  model path's direct convolution (emit_conv.py) in the layout O2 gives it (NCHW<W>c
  when the channels fill whole blocks, else NCHW; the relayout of x is not timed);
- ``sgemm``: numpy's OpenBLAS ``sgemm`` (1 thread) on the same GEMM, or for a
  convolution on its im2col GEMM (``[K/g, C/g*R*S] @ [C/g*R*S, OH*OW]`` per group and
  image, im2col itself not timed): the reference rate of this machine on these FLOPs;
- ``ort``: onnxruntime 1 thread, a one-node MatMul / Gemm / Conv model with constant
  weights (its graph optimisations on, as shipped).

Also a reference sgemm rate (1024^3) measured in the same run, and the contention seen
during each case (share of the spare CPU that other processes used, /proc/stat).

Rates are computed from this thread's CPU time per call (``time.thread_time``): all three
sides run in the calling thread at 1 thread (onnxruntime runs a 1-thread session inline,
OpenBLAS at OPENBLAS_NUM_THREADS=1), so CPU time excludes the time a co-tenant on a
2-core machine preempted us, which wall time does not. Wall-time rates are kept in the
JSON (``gflops_wall``) next to them.

    .venv/bin/python benchmarks/test_gemm_kernels.py --out benchmarks/results/gemm_kernels.json

Under pytest (``pytest benchmarks/test_gemm_kernels.py``) it runs two small cases and
checks the three sides agree numerically; speed is never asserted.

One file past ~400 lines on purpose: it is both the script and its smoke test, and each
case's three sides are built next to each other so that they time the same operands.
"""

from __future__ import annotations

import os

os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")

import argparse  # noqa: E402
import ctypes  # noqa: E402
import json  # noqa: E402
import platform  # noqa: E402
import statistics  # noqa: E402
import sys  # noqa: E402
import time  # noqa: E402
from dataclasses import dataclass  # noqa: E402
from pathlib import Path  # noqa: E402

import numpy as np  # noqa: E402
from threadpoolctl import threadpool_limits  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from guard.compiler.codegen.base import Kernel  # noqa: E402
from guard.compiler.codegen.conv.emitter import Conv, conv_function  # noqa: E402
from guard.compiler.codegen.conv.schedule import Geometry, default_conv_schedule  # noqa: E402
from guard.compiler.codegen.gemm.driver import GemmKernel, register_blas_symbol  # noqa: E402
from guard.compiler.codegen.kernel_plan import Operand  # noqa: E402
from guard.compiler.ir import layout  # noqa: E402
from guard.measure.preflight import contention_between, read_cpu_times  # noqa: E402
from tests.compiler.codegen._jit import Jitted  # noqa: E402

GEMMS = {  # name: (M, N, K, kwargs)
    "transformer_qkv 128x768x768": (128, 768, 768, dict(bias="row")),
    "transformer_ffn1 128x3072x768": (128, 3072, 768, dict(bias="row")),
    "transformer_ffn2 128x768x3072": (128, 768, 3072, dict(bias="row")),
    "attention_qk 128x128x64 (B^T at run time)": (128, 128, 64, dict(trans_b=True, runtime_b=True)),
    "attention_av 128x64x128 (B at run time)": (128, 64, 128, dict(runtime_b=True)),
    "mlp_gemv 1x512x256": (1, 512, 256, dict(bias="row")),
    "mlp_gemv 1x256x512": (1, 256, 512, dict(bias="row")),
    "classifier_gemv 1x1000x2048": (1, 1000, 2048, dict(bias="row")),
    "square 512^3": (512, 512, 512, {}),
    "square 1024^3": (1024, 1024, 1024, {}),
}
CONVS = {  # name: (C, H, K, R, stride, pad, group)
    "resnet50 conv1 7x7/2 3->64 @224": (3, 224, 64, 7, 2, 3, 1),
    "resnet50 3x3 64->64 @56": (64, 56, 64, 3, 1, 1, 1),
    "resnet50 1x1 64->256 @56": (64, 56, 256, 1, 1, 0, 1),
    "resnet50 1x1 256->64 @56": (256, 56, 64, 1, 1, 0, 1),
    "resnet50 3x3 128->128 @28": (128, 28, 128, 3, 1, 1, 1),
    "resnet50 3x3 256->256 @14": (256, 14, 256, 3, 1, 1, 1),
    "resnet50 3x3 512->512 @7": (512, 7, 512, 3, 1, 1, 1),
    "resnet50 1x1/2 1024->2048 @14": (1024, 14, 2048, 1, 2, 0, 1),
    "resnet50 1x1 2048->512 @7": (2048, 7, 512, 1, 1, 0, 1),
    "squeezenet squeeze 1x1 96->16 @55": (96, 55, 16, 1, 1, 0, 1),
    "squeezenet expand 3x3 16->64 @55": (16, 55, 64, 3, 1, 1, 1),
    "inception 5x5 192->32 @28": (192, 28, 32, 5, 1, 2, 1),
    "grouped 3x3 g=32 256->256 @28": (256, 28, 256, 3, 1, 1, 32),
    "depthwise 3x3 32 @112": (32, 112, 32, 3, 1, 1, 32),
    "depthwise 3x3/2 64 @112": (64, 112, 64, 3, 2, 1, 64),
}
ROUNDS = 9
ROUND_S = 0.05  # target seconds per side per round


@dataclass
class Side:
    name: str
    call: object  # () -> None
    times: list  # CPU time of this thread per call, per round
    wall: list  # wall time per call, per round


def _calls_per_round(fn, flops: int) -> int:
    t = time.perf_counter()
    fn()
    dt = max(time.perf_counter() - t, 1e-6)
    return max(1, int(ROUND_S / dt))


def _interleaved(sides: list[Side], flops: int, rounds: int) -> dict:
    reps = {s.name: _calls_per_round(s.call, flops) for s in sides}
    for s in sides:  # warm-up
        for _ in range(reps[s.name]):
            s.call()
    before = read_cpu_times()
    for r in range(rounds):
        order = sides[r % len(sides) :] + sides[: r % len(sides)]
        for s in order:
            n = reps[s.name]
            t, c = time.perf_counter(), time.thread_time()
            for _ in range(n):
                s.call()
            s.times.append((time.thread_time() - c) / n)
            s.wall.append((time.perf_counter() - t) / n)
    contention = contention_between(before, read_cpu_times())
    out = {"contention": contention}
    for s in sides:
        med = statistics.median(s.times)
        wall = statistics.median(s.wall)
        # cpu/wall near 1: the work ran in this thread (else its CPU time would not count it)
        out[s.name] = {
            "median_cpu_s": med,
            "median_wall_s": wall,
            "cpu_over_wall": med / wall,
            "gflops": flops / med / 1e9,
            "gflops_wall": flops / wall / 1e9,
        }
    return out


def _ort_session(model):
    import onnxruntime as ort

    so = ort.SessionOptions()
    so.intra_op_num_threads = 1
    so.inter_op_num_threads = 1
    return ort.InferenceSession(model.SerializeToString(), so, providers=["CPUExecutionProvider"])


def _ort_gemm(a, b, bias, trans_b: bool, runtime_b: bool):
    from onnx import TensorProto, helper, numpy_helper

    inputs = [helper.make_tensor_value_info("a", TensorProto.FLOAT, a.shape)]
    inits = []
    nodes = []
    bname = "b"
    if runtime_b:
        inputs.append(helper.make_tensor_value_info("b", TensorProto.FLOAT, b.shape))
    else:
        inits.append(numpy_helper.from_array(b, "b"))
    if trans_b:
        nodes.append(helper.make_node("Transpose", ["b"], ["bt"], perm=[1, 0]))
        bname = "bt"
    if bias is not None:
        inits.append(numpy_helper.from_array(bias, "bias"))
        nodes.append(helper.make_node("MatMul", ["a", bname], ["ab"]))
        nodes.append(helper.make_node("Add", ["ab", "bias"], ["y"]))
    else:
        nodes.append(helper.make_node("MatMul", ["a", bname], ["y"]))
    graph = helper.make_graph(
        nodes, "g", inputs, [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)], inits
    )
    sess = _ort_session(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]))
    feeds = {"a": a, **({"b": b} if runtime_b else {})}
    return sess, feeds


def _ort_conv(x, w, bias, stride, pad, group):
    from onnx import TensorProto, helper, numpy_helper

    node = helper.make_node(
        "Conv", ["x", "w", "b"], ["y"], strides=[stride] * 2, pads=[pad] * 4, group=group
    )
    graph = helper.make_graph(
        [node],
        "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, x.shape)],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
        [numpy_helper.from_array(w, "w"), numpy_helper.from_array(bias, "b")],
    )
    return _ort_session(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])), {
        "x": x
    }


def _proto():
    return ctypes.CFUNCTYPE(None, *([ctypes.c_void_p] * 4))


def bench_gemm(name: str, M: int, N: int, K: int, kw: dict, rng, width: int, rounds: int) -> dict:
    kw = dict(kw)
    runtime_b = kw.pop("runtime_b", False)
    k = GemmKernel(M, N, K, vector_width=width, **kw)
    module = __import__("llvmlite.ir", fromlist=["ir"]).Module("bench")
    k.emit(module, "g", b_packed=not runtime_b)
    t = time.perf_counter()
    jit = Jitted(module)
    compile_s = time.perf_counter() - t
    a = rng.standard_normal((M, K)).astype(np.float32)
    b = rng.standard_normal((N, K) if k.trans_b else (K, N)).astype(np.float32)
    bias = rng.standard_normal(N).astype(np.float32) if k.bias == "row" else None
    c = np.empty((M, N), np.float32)
    barg = b if runtime_b else k.pack_b(b)
    f = _proto()(jit.address("g"))
    args = (
        a.ctypes.data,
        barg.ctypes.data,
        None if bias is None else bias.ctypes.data,
        c.ctypes.data,
    )
    bop = b.T.copy() if k.trans_b else b
    c2 = np.empty_like(c)
    sess, feeds = _ort_gemm(a, b, bias, k.trans_b, runtime_b)
    f(*args)
    ref = sess.run(None, feeds)[0]
    err = float(np.abs(c - ref).max() / (np.abs(ref).max() + 1e-30))
    sides = [
        Side("guard", lambda: f(*args), [], []),
        Side("sgemm", lambda: np.matmul(a, bop, out=c2), [], []),
        Side("ort", lambda: sess.run(None, feeds), [], []),
    ]
    out = _interleaved(sides, k.flops, rounds)
    return {
        "kind": "gemm",
        "name": name,
        "shape": [M, N, K],
        "schedule": repr(k.sched),
        "compile_s": compile_s,
        "max_rel_err_vs_ort": err,
        **out,
    }


def conv_kernel(
    C: int, H: int, K: int, R: int, stride: int, pad: int, group: int, width: int
) -> tuple[Kernel, Geometry, str]:
    """The model path's Conv kernel for one layer, in the layout the O2 pipeline gives a
    convolution whose channels fill whole blocks (NCHW<W>c), else NCHW."""
    lay = f"NCHW{width}c" if C % width == 0 and K % width == 0 else "NCHW"
    attrs = {"layout": lay, "group": group, "strides": [stride] * 2, "dilations": [1, 1],
             "pads": [pad] * 4}  # fmt: skip
    xshape = layout.to_layout_shape((1, C, H, H), lay)
    wshape = (K, C // group, R, R)
    geo = Geometry(attrs, xshape, wshape, width)
    yshape = layout.to_layout_shape((1, K, geo.OH, geo.OW), lay)
    op = lambda n, sh: Operand(n, "arena", 0, tuple(sh), "float32")  # noqa: E731
    ins = (op("x", xshape), op("w", wshape), op("b", (K,)))
    return Kernel("Conv", attrs, ins, (op("y", yshape),), width), geo, lay


def bench_conv(
    name: str,
    C: int,
    H: int,
    K: int,
    R: int,
    stride: int,
    pad: int,
    group: int,
    rng,
    width: int,
    rounds: int,
) -> dict:
    from llvmlite import ir

    k, geo, lay = conv_kernel(C, H, K, R, stride, pad, group, width)
    sched = default_conv_schedule(geo)
    module = ir.Module("bench")
    conv_function(module, "c", k, sched)
    t = time.perf_counter()
    jit = Jitted(module)
    compile_s = time.perf_counter() - t
    x = rng.standard_normal((1, C, H, H)).astype(np.float32)
    w = (rng.standard_normal((K, C // group, R, R)) * 0.1).astype(np.float32)
    bias = rng.standard_normal(K).astype(np.float32)
    xl = layout.to_layout(x, lay)
    y = np.empty(k.outputs[0].shape, np.float32)
    wp = Conv().pack("Conv", k.attrs, 1, w, [xl.shape], width)
    f = _proto()(jit.address("c"))
    args = (xl.ctypes.data, wp.ctypes.data, bias.ctypes.data, y.ctypes.data)
    sess, feeds = _ort_conv(x, w, bias, stride, pad, group)
    f(*args)
    ref = sess.run(None, feeds)[0]
    err = float(np.abs(layout.to_nchw(y, lay) - ref).max() / (np.abs(ref).max() + 1e-30))
    # the im2col GEMM at the same FLOPs, per group (im2col itself not timed)
    crs = (C // group) * R * R
    wa = [rng.standard_normal((K // group, crs)).astype(np.float32) for _ in range(group)]
    xc = [rng.standard_normal((crs, geo.OH * geo.OW)).astype(np.float32) for _ in range(group)]
    outs = [np.empty((K // group, geo.OH * geo.OW), np.float32) for _ in range(group)]

    def sgemm() -> None:
        for g in range(group):
            np.matmul(wa[g], xc[g], out=outs[g])

    sides = [
        Side("guard", lambda: f(*args), [], []),
        Side("sgemm", sgemm, [], []),
        Side("ort", lambda: sess.run(None, feeds), [], []),
    ]
    out = _interleaved(sides, geo.flops, rounds)
    return {
        "kind": "conv",
        "name": name,
        "shape": [C, H, K, R, stride, pad, group],
        "layout": lay,
        "schedule": repr(sched),
        "compile_s": compile_s,
        "max_rel_err_vs_ort": err,
        **out,
    }


def reference_sgemm_gflops(rng) -> float:
    n = 1024
    a = rng.standard_normal((n, n)).astype(np.float32)
    b = rng.standard_normal((n, n)).astype(np.float32)
    c = np.empty_like(a)
    np.matmul(a, b, out=c)
    times = []
    for _ in range(5):
        t = time.thread_time()
        np.matmul(a, b, out=c)
        times.append(time.thread_time() - t)
    return 2 * n**3 / statistics.median(times) / 1e9


def resnet50_convs() -> list[tuple[int, int, int, int, int, int]]:
    """(C, H, K, R, stride, pad) of resnet50's 53 convolutions (batch 1, 224x224)."""
    layers = [(3, 224, 64, 7, 2, 3)]
    hw = 56
    stages = (
        (64, 64, 256, 3, 1),
        (256, 128, 512, 4, 2),
        (512, 256, 1024, 6, 2),
        (1024, 512, 2048, 3, 2),
    )
    for cin, mid, out, blocks, stride in stages:
        for i in range(blocks):
            s = stride if i == 0 else 1
            c = cin if i == 0 else out
            layers.append((c, hw, mid, 1, 1, 0))
            layers.append((mid, hw, mid, 3, s, 1))
            layers.append((mid, hw // s, out, 1, 1, 0))
            if i == 0:
                layers.append((c, hw, out, 1, s, 0))
                hw //= s
    return layers


def compile_time_resnet50(width: int) -> dict:
    """All 53 resnet50 convolutions in one module (the model path's emitter, default
    schedules): emit, then O3 and object code for the host, as an AOT build does."""
    import llvmlite.binding as llvm
    from llvmlite import ir

    t0, c0 = time.perf_counter(), time.thread_time()
    module = ir.Module("resnet50_convs")
    layers = resnet50_convs()
    for i, (c, hw, k, r, st, pd) in enumerate(layers):
        kern, geo, _ = conv_kernel(c, hw, k, r, st, pd, 1, width)
        conv_function(module, f"conv{i}", kern, default_conv_schedule(geo))
    emit_cpu = time.thread_time() - c0
    tm = llvm.Target.from_default_triple().create_target_machine(
        cpu=llvm.get_host_cpu_name(), features=llvm.get_host_cpu_features().flatten(), opt=3
    )
    mod = llvm.parse_assembly(str(module))
    pb = llvm.create_pass_builder(tm, llvm.create_pipeline_tuning_options(speed_level=3))
    pb.getModulePassManager().run(mod, pb)
    obj = tm.emit_object(mod)
    return {
        "convolutions": len(layers),
        "emit_cpu_s": emit_cpu,
        "total_cpu_s": time.thread_time() - c0,
        "total_wall_s": time.perf_counter() - t0,
        "object_bytes": len(obj),
    }


def run(gemms: dict, convs: dict, rounds: int = ROUNDS, compile_bench: bool = True) -> dict:
    import llvmlite.binding as llvm

    from tests.compiler.codegen._jit import host_vector_width

    register_blas_symbol()
    rng = np.random.default_rng(0)
    width = host_vector_width()
    results = []
    with threadpool_limits(1):
        ref = reference_sgemm_gflops(rng)
        for name, (M, N, K, kw) in gemms.items():
            results.append(bench_gemm(name, M, N, K, kw, rng, width, rounds))
            _print_row(results[-1])
        for name, spec in convs.items():
            results.append(bench_conv(name, *spec, rng, width, rounds))
            _print_row(results[-1])
        ref_after = reference_sgemm_gflops(rng)
    compile_stats = compile_time_resnet50(width) if compile_bench else None
    return {
        "resnet50_convs_compile": compile_stats,
        "command": " ".join([Path(sys.executable).name, *sys.argv]),
        "host": {
            "cpu": llvm.get_host_cpu_name(),
            "machine": platform.machine(),
            "vector_width": width,
            "cores": os.cpu_count(),
        },
        "reference_sgemm_1024_gflops": [ref, ref_after],
        "rounds": rounds,
        "results": results,
    }


def _print_row(r: dict) -> None:
    g, s, o = r["guard"]["gflops"], r["sgemm"]["gflops"], r["ort"]["gflops"]
    cont = r["contention"]
    print(
        f"| {r['name']} | {g:.1f} | {s:.1f} | {o:.1f} | {g / s:.2f} | {g / o:.2f} | "
        f"{'n/a' if cont is None else f'{cont:.0%}'} |",
        flush=True,
    )


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--out", type=Path, help="write the results JSON here")
    p.add_argument("--rounds", type=int, default=ROUNDS)
    args = p.parse_args(argv)
    print(
        "| case | guard GFLOP/s | sgemm GFLOP/s | ort GFLOP/s | guard/sgemm | guard/ort | contention |"
    )
    print("|---|---|---|---|---|---|---|")
    res = run(GEMMS, CONVS, args.rounds)
    print(
        f"reference sgemm 1024^3 (1 thread): {res['reference_sgemm_1024_gflops'][0]:.1f} GFLOP/s before, {res['reference_sgemm_1024_gflops'][1]:.1f} after"
    )
    cs = res["resnet50_convs_compile"]
    print(
        f"resnet50's {cs['convolutions']} convolutions in one module: emit + O3 + object "
        f"{cs['total_cpu_s']:.2f} s CPU ({cs['total_wall_s']:.2f} s wall), "
        f"object {cs['object_bytes'] / 1e6:.2f} MB"
    )
    if args.out:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(json.dumps(res, indent=1) + "\n")
    return 0


def test_gemm_kernels_smoke() -> None:
    """Two small cases end to end: all three sides run and agree (speed not asserted)."""
    res = run(
        {"gemm 64x96x80": (64, 96, 80, dict(bias="row"))},
        {"conv 3x3 8->16 @12": (8, 12, 16, 3, 1, 1, 1)},
        rounds=2,
        compile_bench=False,
    )
    for r in res["results"]:
        assert r["max_rel_err_vs_ort"] < 1e-4, r
        assert all(r[s]["gflops"] > 0 for s in ("guard", "sgemm", "ort"))


if __name__ == "__main__":
    raise SystemExit(main())
