"""A realistic results document: 2 models x 2 backends, one failed latency check, one error.

resnet18[bundled] errored during build, so it lacks almost every field, as a real error
result does; its message carries a pipe and angle brackets to exercise escaping.
"""

from __future__ import annotations

import copy
from typing import Any

import pytest

LATENCY_FAIL_MESSAGE = "p50 1.84 ms > bound 1.50 ms on x86_64 (+22.7% vs baseline)"
ERROR_MESSAGE = "resnet18.onnx: node 'Conv_12' <Conv> | group=2 is not supported by bundled"
WARNING = (
    "tuning cache has no entry for target llvm -mcpu=sapphirerapids: expect a 2-10x slower schedule"
)


def _manifest(backend: str, model_sha: str) -> dict[str, Any]:
    compiler = (
        {"name": "guard-bundled", "version": "0.1.0"}
        if backend == "bundled"
        else {
            "name": "onnxruntime",
            "version": "1.32.0",
        }
    )
    return {
        "compiler": compiler,
        "runtime": {"name": backend, "version": "1.32.0" if backend == "onnxruntime" else "0.1.0"},
        "driver": None,
        "target": {
            "raw": "host",
            "canonical": "llvm -mcpu=sapphirerapids -mtriple=x86_64-linux-gnu",
        },
        "tuning_cache": {"sha256": "ab" * 32, "entries": 12, "hits": 12, "misses": 0},
        "model": {"sha256": model_sha, "opset": 17, "inputs": {"x": [1, 64]}},
        "host": {"arch": "x86_64", "cpu": "Intel Xeon", "cores": 2, "threads": 1},
        "guard": {"version": "0.1.0"},
        "sha256": ("c" if backend == "bundled" else "d") * 64,
    }


def _result(
    model: str, backend: str, p50: float, checks: list[dict[str, Any]], **extra: Any
) -> dict[str, Any]:
    verdict = "fail" if any(c["status"] == "fail" for c in checks) else "pass"
    r = {
        "model": model,
        "backend": backend,
        "target": "host",
        "verdict": verdict,
        "error": None,
        "checks": checks,
        "manifest": _manifest(backend, ("1" if model == "mlp" else "2") * 64),
        "latency_ms": {
            "min": p50 * 0.95,
            "p50": p50,
            "p90": p50 * 1.1,
            "p99": p50 * 1.3,
            "mean": p50 * 1.02,
            "stdev": p50 * 0.04,
            "cv": 0.04,
            "n": 40,
        },
        "samples_ms": [p50 * (1 + i / 100) for i in range(5)],
        "partitions": {
            "count": 1,
            "delegated_nodes": 12,
            "fallback_nodes": 0,
            "by_provider": {"CPU": 12},
        },
        "arena_bytes": 3 * 1024 * 1024,
        "arena_lower_bound_bytes": 2 * 1024 * 1024,
        "numerics": {
            "max_abs_err": 3.2e-6,
            "max_rel_err": 1.1e-5,
            "output_sha256": "e" * 64,
            "golden_sha256": "e" * 64,
            "bit_exact": False,
            "top1": 0.97,
            "accuracy": None,
            "golden_status": "match",
        },
        "preflight": {"warnings": []},
        "artefact": f".guard/artefacts/{model}-{backend}",
    }
    r.update(extra)
    return r


def _check(name: str, status: str, value: Any, bound: Any, message: str) -> dict[str, Any]:
    return {"name": name, "status": status, "value": value, "bound": bound, "message": message}


def make_doc() -> dict[str, Any]:
    ok_checks = [
        _check("latency", "pass", 0.42, 1.5, "p50 0.42 ms <= 1.50 ms"),
        _check("tolerance", "pass", 3.2e-6, 1e-5, "max abs err 3.2e-06 <= atol 1e-05"),
        _check("partitions", "pass", 1, 1, "1 partition <= 1"),
    ]
    bundled_checks = [
        _check("latency", "fail", 1.84, 1.5, LATENCY_FAIL_MESSAGE),
        _check("tolerance", "pass", 3.2e-6, 1e-5, "max abs err 3.2e-06 <= atol 1e-05"),
        _check("tuning", "skip", None, 1.0, "no tuning cache for bundled"),
    ]
    graph = {
        "ops_before": {"MatMul": 2, "Add": 2, "Relu": 1},
        "ops_after": {"FusedGemm": 2, "Relu": 1, "Transpose": 1},
        "added": {"FusedGemm": 2, "Transpose": 1},
        "passes": [
            {"name": "fold_constants", "changed": False, "num_folded": 0},
            {"name": "fuse_gemm", "changed": True, "num_fused": 2},
        ],
    }
    resnet_checks = [
        _check("latency", "pass", 21.3, 150, "p50 21.3 ms <= 150 ms"),
        _check("tolerance", "created", None, None, "golden created at suites/goldens/resnet18.npz"),
    ]
    return {
        "schema_version": 1,
        "suite": "smoke",
        "started": "2026-11-29T13:00:00+00:00",
        "git": {
            "commit": "0123456789abcdef0123456789abcdef01234567",
            "dirty": True,
            "branch": "main",
        },
        "suite_sha256": "f" * 64,
        "exit_code": 1,
        "results": [
            _result("mlp", "onnxruntime", 0.42, copy.deepcopy(ok_checks)),
            _result(
                "mlp",
                "bundled",
                1.84,
                bundled_checks,
                graph=graph,
                preflight={"warnings": [WARNING]},
            ),
            _result("resnet18", "onnxruntime", 21.3, resnet_checks),
            {
                "model": "resnet18",
                "backend": "bundled",
                "target": "host",
                "verdict": "error",
                "error": ERROR_MESSAGE,
                "checks": [],
                "manifest": None,
                "latency_ms": None,
            },
        ],
    }


@pytest.fixture
def doc() -> dict[str, Any]:
    return make_doc()
