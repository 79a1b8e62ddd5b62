"""Synthetic results documents (contract v1) for the tracking tests."""

from __future__ import annotations

from typing import Any

TRIPLES = [
    ("mlp", "onnxruntime", "host"),
    ("mlp", "bundled", "host"),
    ("resnet18", "tvm", "llvm -mtriple=aarch64-linux-gnu -mattr=+neon"),
]


def make_result(i: int, model: str, backend: str, target: str) -> dict[str, Any]:
    failed = i == 1
    return {
        "model": model,
        "backend": backend,
        "target": target,
        "verdict": "fail" if failed else "pass",
        "checks": [
            {
                "name": "latency.p50_ms",
                "status": "fail" if failed else "pass",
                "value": 12.5 + i,
                "bound": 10.0,
                "message": "p50 above bound" if failed else "",
            },
            {"name": "partitions.max", "status": "pass", "value": 1, "bound": 1, "message": ""},
            {
                "name": "tolerance",
                "status": "fail" if failed else "pass",
                "value": 1e-3,
                "bound": 1e-4,
                "message": None,
            },
        ],
        "manifest": {
            "compiler": {"name": backend, "version": f"1.{i}.0"},
            "runtime": {"name": backend, "version": "1.32.0"},
            "driver": {},
            "target": {"raw": target, "canonical": f"canon:{target}"},
            "tuning_cache": {"sha256": "ab" * 32, "entries": 10, "hits": 9, "misses": 1},
            "model": {"sha256": "cd" * 32, "opset": 17},
            "host": {"arch": "x86_64", "cpu": "Xeon", "threads": 1},
            "flags": ["-O3", "fast-math"],
            "nullable": None,
            "sha256": f"{i:064d}",
        },
        "latency_ms": {
            "min": 1.0 + i,
            "p50": 2.0 + i,
            "p90": 3.0 + i,
            "p99": 4.0 + i,
            "mean": 2.5 + i,
            "stdev": 0.5,
            "cv": 0.2,
            "n": 5,
        },
        "samples_ms": [1.0 + i, 2.0 + i, 2.5 + i, 3.0 + i, 4.0 + i],
        "partitions": {"count": 1 + i, "delegated_nodes": 40, "fallback_nodes": i},
        "arena_bytes": 1_200_000 + i,
        "arena_lower_bound_bytes": 1_000_000,
        "numerics": {
            "max_abs_err": 1e-6 * (i + 1),
            "max_rel_err": 1e-5,
            "top1": 0.97,
            "accuracy": 0.96,
            "output_sha256": "ef" * 32,
            "golden_sha256": None,
        },
        "graph": None
        if i == 0
        else {
            "ops_before": {"Conv": 3, "Relu": 3},
            "ops_after": {"FusedConv": 3},
            "added": {},
            "passes": [{"name": "fuse", "changed": True}],
        },
        "preflight": {"ok": True},
        "artefact": f"/tmp/artefacts/{model}-{backend}",
        "some_future_key": {"x": 1},
    }


def make_doc(triples: list[tuple[str, str, str]] | None = None, suite: str = "smoke") -> dict:
    return {
        "schema_version": 1,
        "suite": suite,
        "started": "2026-11-29T13:00:00+00:00",
        "git": {
            "commit": "0123456789abcdef0123456789abcdef01234567",
            "dirty": True,
            "branch": "main",
        },
        "suite_sha256": "12" * 32,
        "results": [make_result(i, *t) for i, t in enumerate(triples or TRIPLES)],
    }
