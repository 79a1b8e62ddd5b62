from __future__ import annotations

import json

import pytest

from guard.compiler import graph_diff, optimize, print_graph
from guard.compiler.ir.core import Graph
from guard.compiler.passes.base import Pass, PassResult
from guard.compiler.passes.diff import format_diff
from guard.compiler.passes.pipeline import PIPELINES, FixedPoint, PassError

from ._helpers import HEADER, assert_same_outputs, graph_of

TEXT = (
    HEADER
    + """
g (float[2, 8] x) => (float[2, 8] y) {
    one = Constant <value = float {1}> ()
    c = Constant <value = float {2}> ()
    cc = Add(c, c)
    a = Mul(x, one)
    b = Div(a, cc)
    e = Exp(b)
    y = Relu(e)
}"""
)


def test_named_pipelines() -> None:
    g = graph_of(TEXT)
    g0, r0 = optimize(g, "O0")
    assert print_graph(g0) == print_graph(g) and r0.passes == []
    g1, r1 = optimize(g, "O1", verify_each=True)
    assert [n.op for n in g1.nodes] == ["Mul", "Exp", "Relu"]
    g2, r2 = optimize(g, "O2", verify_each=True)
    assert [n.op for n in g2.nodes] == ["FusedElementwise"]
    assert {p.name for p in r2.passes} >= {"fold_constants", "fuse_elementwise", "assign_layout"}
    for out in (g1, g2):
        assert_same_outputs(g, out)
    assert set(PIPELINES) == {"O0", "O1", "O2"}


def test_graph_diff_json_and_text() -> None:
    g = graph_of(TEXT)
    g2, rep = optimize(g, "O2")
    d = graph_diff(g, g2, rep)
    json.dumps(d)
    assert d["ops_before"]["Div"] == 1 and d["ops_after"] == {"FusedElementwise": 1}
    assert d["folded"] >= 1 and d["fused"] >= 2 and d["added"] == {}
    assert all({"name", "changed"} <= set(p) for p in d["passes"])
    text = format_diff(d)
    assert "FusedElementwise" in text and "5 -> 1 nodes" in text


class _Flipper(Pass):
    name = "flipper"

    def run(self, graph: Graph) -> PassResult:
        return PassResult(True)


class _Breaker(Pass):
    name = "breaker"

    def run(self, graph: Graph) -> PassResult:
        graph.nodes.reverse()
        return PassResult(True)


def test_fixed_point_cap_warns() -> None:
    g = graph_of(TEXT)
    with pytest.warns(RuntimeWarning, match="hit its cap of 3"):
        _, rep = optimize(
            g, "custom", entries=[FixedPoint([(_Flipper(), "always changes")], cap=3)]
        )
    assert len(rep.passes) == 3 and rep.warnings


def test_failure_names_the_pass_and_the_ones_before() -> None:
    g = graph_of(TEXT)
    from guard.compiler.passes.eliminate_dead_code import EliminateDeadCode

    with pytest.raises(
        PassError, match=r"pass breaker failed \(passes before it: eliminate_dead_code\)"
    ):
        optimize(
            g,
            "custom",
            verify_each=True,
            entries=[(EliminateDeadCode(), "x"), (_Breaker(), "breaks the order")],
        )
