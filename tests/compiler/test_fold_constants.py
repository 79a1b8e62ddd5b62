from __future__ import annotations

import numpy as np

from guard.compiler.passes.fold_constants import FoldConstants

from ._helpers import HEADER, apply, assert_same_outputs, graph_of, ops

TEXT = (
    HEADER
    + """
g (float[2, 4] x) => (float[2, 4] y) {
    a = Constant <value = float[4] {1, 2, 3, 4}> ()
    b = Constant <value = float[4] {0.5, 0.5, 0.5, 0.5}> ()
    s = Mul(a, b)
    t = Exp(s)
    y = Add(x, t)
}"""
)


def test_folds_constant_subgraph_and_keeps_numbers() -> None:
    g = graph_of(TEXT)
    g2, res = apply(FoldConstants(), g)
    assert ops(g2) == ["Add"]
    assert res.changed and res.stats["num_folded"] == 2
    folded = g2.const(g2.nodes[0].inputs[1])
    np.testing.assert_array_equal(folded, np.exp(np.float32([0.5, 1, 1.5, 2])))
    assert_same_outputs(g, g2)


def test_declines_over_the_size_cap_and_says_so() -> None:
    g = graph_of(
        HEADER
        + """
    g (float[1] x) => (float[1000, 1000] y) {
        c = Constant <value = float[1] {2}> ()
        shp = Constant <value = int64[2] {1000, 1000}> ()
        big = Expand(c, shp)
        y = Add(big, x)
    }"""
    )
    g2, res = apply(FoldConstants(max_bytes=1 << 20), g)
    assert ops(g2) == ["Expand", "Add"]
    assert not res.changed and res.stats["num_declined_size"] == 1
    assert "over the 1048576-byte fold cap" in res.notes[0]
    g3, res3 = apply(FoldConstants(max_bytes=8 << 20), g)
    assert ops(g3) == ["Add"] and res3.changed


def test_does_not_fold_nodes_reading_inputs() -> None:
    g = graph_of(HEADER + "g (float[3] x) => (float[3] y) { y = Relu(x) }")
    g2, res = apply(FoldConstants(), g)
    assert ops(g2) == ["Relu"] and not res.changed
