from __future__ import annotations

from guard.compiler.passes.fuse_elementwise import FuseElementwise

from ._helpers import HEADER, apply, assert_same_outputs, graph_of, ops


def test_fuses_chain_and_epilogue() -> None:
    g = graph_of(
        HEADER
        + """
    g (float[1, 3, 8, 8] x, float[1, 4, 8, 8] r) => (float[1, 4, 8, 8] y, float[5] z) {
        w = Constant <value = float[4, 3, 1, 1] {1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12}> ()
        b = Constant <value = float[4, 1, 1] {1, -1, 2, -2}> ()
        c = Conv(x, w)
        cb = Add(c, b)
        res = Add(cb, r)
        y = Relu(res)
        v = Constant <value = float[5] {1, 2, 3, 4, 5}> ()
        e = Exp(v)
        n = Neg(e)
        z = Sigmoid(n)
    }"""
    )
    g2, res = apply(FuseElementwise(), g)
    assert ops(g2) == ["FusedConv", "FusedElementwise"]
    conv = g2.nodes[0]
    assert [s["op"] for s in conv.attrs["program"]] == ["Add", "Add", "Relu"]
    assert conv.attrs["program"][0]["args"] == ["acc", 2]
    assert conv.outputs == ["y"] and "r" in conv.inputs
    assert [s["op"] for s in g2.nodes[1].attrs["program"]] == ["Exp", "Neg", "Sigmoid"]
    assert res.stats == {"num_epilogues": 1, "num_fused_chains": 1, "num_ops_fused": 6}
    assert_same_outputs(g, g2)


def test_does_not_fuse_across_shared_values_or_broadcasts() -> None:
    g = graph_of(
        HEADER
        + """
    g (float[4] x, float[3, 4] b) => (float[4] y, float[4] z, float[3, 4] w) {
        a = Exp(x)
        y = Relu(a)
        z = Neg(a)
        w = Add(y, b)
    }"""
    )
    g2, res = apply(FuseElementwise(), g)
    # a has two readers; Add(y, b) grows [4] to [3, 4]; y is a graph output.
    assert ops(g2) == ["Exp", "Relu", "Neg", "Add"] and not res.changed
