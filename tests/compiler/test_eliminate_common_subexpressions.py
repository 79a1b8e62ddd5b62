from __future__ import annotations

from guard.compiler.passes.eliminate_common_subexpressions import EliminateCommonSubexpressions

from ._helpers import HEADER, apply, assert_same_outputs, graph_of, ops


def test_merges_identical_nodes_and_equal_constants() -> None:
    g = graph_of(
        HEADER
        + """
    g (float[3] x) => (float[3] y) {
        c1 = Constant <value = float[1] {2}> ()
        c2 = Constant <value = float[1] {2}> ()
        a = Mul(x, c1)
        b = Mul(x, c2)
        y = Add(a, b)
    }"""
    )
    g2, res = apply(EliminateCommonSubexpressions(), g)
    assert ops(g2) == ["Mul", "Add"]
    assert g2.nodes[1].inputs == [g2.nodes[0].outputs[0]] * 2
    assert res.stats == {"num_eliminated": 1, "num_constants_merged": 1}
    assert_same_outputs(g, g2)


def test_different_attributes_are_not_merged() -> None:
    g = graph_of(
        HEADER
        + """
    g (float[2, 3] x) => (float[2, 3] y) {
        a = Softmax <axis = 0> (x)
        b = Softmax <axis = 1> (x)
        y = Add(a, b)
    }"""
    )
    g2, res = apply(EliminateCommonSubexpressions(), g)
    assert ops(g2) == ["Softmax", "Softmax", "Add"] and not res.changed


def test_duplicate_graph_outputs_keep_their_names() -> None:
    g = graph_of(
        HEADER
        + """
    g (float[3] x) => (float[3] y, float[3] z) {
        y = Relu(x)
        z = Relu(x)
    }"""
    )
    g2, res = apply(EliminateCommonSubexpressions(), g)
    assert g2.outputs == ["y", "z"] and len(g2.nodes) == 2 and not res.changed
