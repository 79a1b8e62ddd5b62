"""Shared fixtures for compiler tests: ONNX text -> IR, run a pass, compare numerically."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
import onnx.parser

from guard.compiler import Graph, import_onnx, run_reference, verify
from guard.compiler.passes.base import Pass, PassResult


def graph_of(text: str, shapes: dict[str, tuple[int, ...]] | None = None) -> Graph:
    g = import_onnx(onnx.parser.parse_model(text), shapes)
    verify(g)
    return g


def feeds_for(g: Graph, seed: int = 0) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(seed)
    out = {}
    for name in g.inputs:
        v = g.values[name]
        if v.dtype.kind == "f":
            out[name] = rng.standard_normal(v.shape).astype(v.dtype)
        elif v.dtype.kind == "b":
            out[name] = rng.integers(0, 2, v.shape).astype(bool)
        else:
            out[name] = rng.integers(0, 5, v.shape).astype(v.dtype)
    return out


def apply(p: Pass, g: Graph) -> tuple[Graph, PassResult]:
    """Run ``p`` on a clone of ``g`` and verify the result."""
    g2 = g.clone()
    result = p.run(g2)
    verify(g2)
    return g2, result


def assert_same_outputs(
    a: Graph, b: Graph, seeds: tuple[int, ...] = (0, 1), rtol: float = 1e-5, atol: float = 1e-6
) -> None:
    for seed in seeds:
        feeds = feeds_for(a, seed)
        ra, rb = run_reference(a, feeds), run_reference(b, feeds)
        assert list(ra) == list(rb)
        for k in ra:
            np.testing.assert_allclose(rb[k], ra[k], rtol=rtol, atol=atol, err_msg=k)


def ops(g: Graph) -> list[str]:
    return [n.op for n in g.nodes]


HEADER = '<ir_version: 8, opset_import: ["" : 17]>'


def assert_native_equals_reference(
    g: Graph,
    target: Any,
    feeds: Callable[[int], dict[str, np.ndarray]],
    outputs: tuple[str, ...] = ("y",),
    seeds: tuple[int, ...] = (0, 1),
) -> Any:
    """``g`` plans to one native partition whose code, at 1 and 2 threads, equals the
    reference interpreter bit for bit on ``outputs`` for each seed's feeds; returns the
    generated code (its IR text for a test to read)."""
    from guard.compiler.codegen.build import jit
    from guard.compiler.partition.plan import plan

    compiled = plan(g)
    assert compiled.partition_report["count"] == 1, dict(compiled.partitions.declines)
    rt1, code = jit(compiled, target, threads=1)
    rt2, _ = jit(compiled, target, threads=2, code=code)
    for seed in seeds:
        ref = run_reference(g, feeds(seed))
        for k in outputs:
            for rt in (rt1, rt2):
                np.testing.assert_array_equal(rt.run(feeds(seed))[k], ref[k], err_msg=k)
    return code
