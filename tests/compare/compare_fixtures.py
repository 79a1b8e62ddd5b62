"""Synthetic results documents (docs/ARCHITECTURE.md, results contract v1) for compare tests."""

from __future__ import annotations

import copy
from typing import Any

import numpy as np


def manifest(**over: Any) -> dict[str, Any]:
    m = {
        "compiler": {"name": "onnxruntime", "version": "1.32.0"},
        "runtime": {"name": "onnxruntime", "version": "1.32.0"},
        "driver": {},
        "target": {"raw": "host", "canonical": "llvm -mcpu=sapphirerapids"},
        "tuning_cache": {"sha256": "t0", "entries": 10, "hits": 10, "misses": 0},
        "model": {"sha256": "m0", "opset": 17},
        "host": {"arch": "x86_64", "cpu": "Xeon EMR", "threads": 1},
        "sha256": "h0",
    }
    for path, value in over.items():
        node = m
        *parents, leaf = path.split("__")
        for k in parents:
            node = node[k]
        node[leaf] = value
    return m


def rounds_of(samples: list[float], n_rounds: int = 5) -> list[dict[str, Any]]:
    """``samples`` cut into consecutive rounds, as guard run records them."""
    out = []
    for chunk in np.array_split(np.asarray(samples, dtype=float), n_rounds):
        c = [float(x) for x in chunk]
        out.append(
            {
                "samples_ms": c,
                "p50": float(np.median(c)),
                "n": len(c),
                "contention": None,
                "cpu_share": None,
            }
        )
    return out


def result(model: str, samples: np.ndarray, backend: str = "onnxruntime", **extra: Any) -> dict:
    s = [float(x) for x in samples]
    r = {
        "model": model,
        "backend": backend,
        "target": "host",
        "verdict": "pass",
        "checks": [],
        "manifest": manifest(),
        "latency_ms": {"p50": float(np.median(s)), "n": len(s)},
        "samples_ms": s,
        "rounds": rounds_of(s) if len(s) >= 5 else None,
        "partitions": {"count": 1, "delegated_nodes": 10, "fallback_nodes": 0},
        "arena_bytes": 1_000_000,
        "arena_lower_bound_bytes": 800_000,
        "numerics": {
            "max_abs_err": 1e-6,
            "max_rel_err": 1e-5,
            "output_sha256": "o0",
            "golden_sha256": "g",
        },
        "graph": {"ops_after": {"Conv": 10, "Relu": 10}},
        "artefact": f"build/{model}",
    }
    r.update(copy.deepcopy(extra))
    return r


def doc(*results: dict, suite: str = "smoke") -> dict:
    return {
        "schema_version": 1,
        "suite": suite,
        "started": "2026-11-29T13:00:00Z",
        "git": {"commit": "abc", "dirty": False},
        "results": list(results),
    }


def lat(rng: np.random.Generator, n: int = 200, factor: float = 1.0, ms: float = 2.0):
    return ms * factor * np.exp(rng.normal(0, 0.04, n))
