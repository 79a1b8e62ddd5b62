from __future__ import annotations

from guard.compiler.passes.eliminate_dead_code import EliminateDeadCode

from ._helpers import HEADER, apply, assert_same_outputs, graph_of, ops


def test_removes_unused_chain_and_constants() -> None:
    g = graph_of(
        HEADER
        + """
    g (float[3] x) => (float[3] y) {
        c = Constant <value = float[3] {1, 2, 3}> ()
        unused = Mul(x, c)
        unused2 = Exp(unused)
        y = Relu(x)
    }"""
    )
    g2, res = apply(EliminateDeadCode(), g)
    assert ops(g2) == ["Relu"]
    assert res.stats["num_removed"] == 2 and "c" not in g2.values
    assert_same_outputs(g, g2)


def test_keeps_everything_that_reaches_an_output() -> None:
    g = graph_of(
        HEADER
        + """
    g (float[3] x) => (float[3] y, float[3] z) {
        y = Relu(x)
        z = Exp(y)
    }"""
    )
    g2, res = apply(EliminateDeadCode(), g)
    assert ops(g2) == ["Relu", "Exp"] and not res.changed
