"""Shared fixtures for compiler tests: ONNX text -> IR, run a pass, compare numerically."""

from __future__ import annotations

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
