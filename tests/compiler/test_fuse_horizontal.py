from __future__ import annotations

from guard.compiler.passes.fuse_horizontal import FuseHorizontal

from ._helpers import HEADER, apply, assert_same_outputs, graph_of, ops

QKV = (
    HEADER
    + """
g (float[2, 4, 3] x) => (float[2, 4, 2] q, float[2, 4, 2] k, float[2, 4, 3] v) {
    wq = Constant <value = float[3, 2] {1, 2, 3, 4, 5, 6}> ()
    wk = Constant <value = float[3, 2] {-1, 0, 1, 0, -1, 2}> ()
    wv = Constant <value = float[3, 3] {1, 0, 0, 0, 1, 0, 0, 0, 1}> ()
    q = MatMul(x, wq)
    k = MatMul(x, wk)
    v = MatMul(x, wv)
}"""
)


def test_siblings_become_one_matmul_and_a_split() -> None:
    g = graph_of(QKV)
    g2, res = apply(FuseHorizontal(), g)
    assert ops(g2) == ["MatMul", "Split"]
    assert g2.values[g2.nodes[0].inputs[1]].shape == (3, 7)
    assert g2.nodes[1].outputs == ["q", "k", "v"] and g2.nodes[1].attrs["split"] == [2, 2, 3]
    assert res.stats["num_groups"] == 1
    assert_same_outputs(g, g2)


def test_gemm_siblings_with_bias_and_transb() -> None:
    g = graph_of(
        HEADER
        + """
    g (float[2, 3] x) => (float[2, 2] a, float[2, 2] b) {
        w1 = Constant <value = float[2, 3] {1, 2, 3, 4, 5, 6}> ()
        w2 = Constant <value = float[2, 3] {0, 1, 0, 1, 0, 1}> ()
        b1 = Constant <value = float[2] {1, 2}> ()
        b2 = Constant <value = float[2] {3, 4}> ()
        a = Gemm <transB = 1> (x, w1, b1)
        b = Gemm <transB = 1> (x, w2, b2)
    }"""
    )
    g2, res = apply(FuseHorizontal(), g)
    assert ops(g2) == ["Gemm", "Split"] and res.changed
    assert_same_outputs(g, g2)


def test_must_not_fire_on_different_inputs_or_runtime_weights() -> None:
    g = graph_of(
        HEADER
        + """
    g (float[2, 3] x, float[2, 3] x2, float[3, 2] wr) => (float[2, 2] a, float[2, 2] b, float[2, 2] c) {
        w = Constant <value = float[3, 2] {1, 2, 3, 4, 5, 6}> ()
        a = MatMul(x, w)
        b = MatMul(x2, w)
        c = MatMul(x, wr)
    }"""
    )
    g2, res = apply(FuseHorizontal(), g)
    assert ops(g2) == ["MatMul"] * 3 and not res.changed


def test_must_not_fire_on_a_runtime_gemm_bias() -> None:
    # The bias is a graph input: there is nothing to concatenate at compile time.
    g = graph_of(
        HEADER
        + """
    g (float[2, 3] x, float[2] b1) => (float[2, 2] a, float[2, 2] b) {
        w1 = Constant <value = float[2, 3] {1, 2, 3, 4, 5, 6}> ()
        w2 = Constant <value = float[2, 3] {0, 1, 0, 1, 0, 1}> ()
        b2 = Constant <value = float[2] {3, 4}> ()
        a = Gemm <transB = 1> (x, w1, b1)
        b = Gemm <transB = 1> (x, w2, b2)
    }"""
    )
    g2, res = apply(FuseHorizontal(), g)
    assert ops(g2) == ["Gemm", "Gemm"] and not res.changed


def test_bias_adds_merge_into_one_add_before_the_split() -> None:
    g = graph_of(
        HEADER
        + """
    g (float[2, 3] x) => (float[2, 2] q, float[2, 2] k) {
        wq = Constant <value = float[3, 2] {1, 2, 3, 4, 5, 6}> ()
        wk = Constant <value = float[3, 2] {-1, 0, 1, 0, -1, 2}> ()
        bq = Constant <value = float[2] {0.5, -0.5}> ()
        bk = Constant <value = float[2] {1, 2}> ()
        mq = MatMul(x, wq)
        mk = MatMul(x, wk)
        q = Add(mq, bq)
        k = Add(bk, mk)
    }"""
    )
    g2, res = apply(FuseHorizontal(), g)
    assert ops(g2) == ["MatMul", "Add", "Split"] and g2.nodes[2].outputs == ["q", "k"]
    assert res.stats["num_bias_adds_merged"] == 2
    assert_same_outputs(g, g2)
