"""Bundled compiler (and TVM, untuned) latency as a ratio to onnxruntime, measured side by side.

Absolute times on shared machines are noise; ratios measured in the same run, interleaved,
are the number worth tracking. Run:

    pytest benchmarks/test_backends_vs_onnxruntime.py --benchmark-only \
        --benchmark-json .guard/bench.json

Each test times onnxruntime and the other backend on the same artefact inputs, alternating
rounds (ABAB) so drift and contention hit both sides, and records the ratio of medians in
``extra_info`` (pytest-benchmark's JSON keeps it).
"""

from __future__ import annotations

import time
from pathlib import Path

import numpy as np
import pytest

from guard.backends import get_backend
from guard.backends.base import BuildRequest
from guard.manifest import canonicalize
from guard.model import bind, load_model, make_inputs

MODELS = {
    "mlp": {"x": [1, 256]},
    "digits": {"x": [1, 64]},
    "transformer": {},
    "inception_block": {},
    "squeezenet": {},
    "resnet50": {},
}
ROUNDS = 15


def _session(backend: str, name: str, tmp: Path):
    from guard import zoo
    from guard.suite import InputSpec

    path = zoo.model_path(name)
    specs = {k: InputSpec(k, tuple(v)) for k, v in MODELS[name].items()}
    spec = bind(load_model(path), path, specs, f"zoo:{name}")
    out = tmp / backend
    out.mkdir()
    be = get_backend(backend)
    be.build(
        BuildRequest(
            model_path=path,
            input_shapes=spec.shapes,
            target_raw="host",
            target_canonical=canonicalize("host"),
            threads=1,
            out_dir=out,
        )
    )
    return be.load(out, 1), make_inputs(spec, specs)


def _median_of(fn, n: int) -> float:
    ts = []
    for _ in range(n):
        t0 = time.perf_counter()
        fn()
        ts.append(time.perf_counter() - t0)
    return float(np.median(ts))


@pytest.mark.parametrize("backend", ["bundled", "tvm"])
@pytest.mark.parametrize("name", list(MODELS))
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
