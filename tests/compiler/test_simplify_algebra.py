from __future__ import annotations

import numpy as np

from guard.compiler import run_reference
from guard.compiler.passes.eliminate_dead_code import EliminateDeadCode
from guard.compiler.passes.simplify_algebra import SimplifyAlgebra

from ._helpers import HEADER, apply, assert_same_outputs, graph_of, ops


def test_removes_identities_and_composes_layout_ops() -> None:
    g = graph_of(
        HEADER
        + """
    g (float[2, 3, 4] x) => (float[2, 3, 4] y) {
        one = Constant <value = float[1] {1}> ()
        zero = Constant <value = float[1] {0}> ()
        a = Mul(x, one)
        b = Add(zero, a)
        c = Identity(b)
        t1 = Transpose <perm = [2, 0, 1]> (c)
        t2 = Transpose <perm = [1, 2, 0]> (t1)
        s1 = Constant <value = int64[2] {6, 4}> ()
        r1 = Reshape(t2, s1)
        s2 = Constant <value = int64[3] {2, 3, 4}> ()
        r2 = Reshape(r1, s2)
        y = Relu(r2)
    }"""
    )
    g2, res = apply(SimplifyAlgebra(), g)
    g2, _ = apply(EliminateDeadCode(), g2)  # the composed-away producers are now dead
    assert ops(g2) == ["Relu"] and g2.nodes[0].inputs == ["x"]
    s = res.stats
    assert s["num_mul_one"] == 1 and s["num_add_zero"] == 1 and s["num_identity"] == 1
    assert s["num_transpose_transpose"] >= 1 and s["num_reshape_reshape"] >= 1
    assert_same_outputs(g, g2, atol=0, rtol=0)


def test_division_by_constant_becomes_multiplication_by_reciprocal() -> None:
    g = graph_of(
        HEADER
        + """
    g (float[8] x) => (float[8] y) {
        c = Constant <value = float[1] {4}> ()
        y = Div(x, c)
    }"""
    )
    g2, res = apply(SimplifyAlgebra(), g)
    assert ops(g2) == ["Mul"] and res.stats["num_div_to_mul"] == 1
    assert float(g2.const(g2.nodes[0].inputs[1])[0]) == 0.25
    assert_same_outputs(g, g2, atol=0, rtol=0)  # power of two: exact


def test_must_not_fire() -> None:
    g = graph_of(
        HEADER
        + """
    g (float[3] x, float[3] d) => (float[3] y, float[2, 3] z, float[3] w) {
        two = Constant <value = float[1] {2}> ()
        zero = Constant <value = float[1] {0}> ()
        ones = Constant <value = float[2, 3] {1, 1, 1, 1, 1, 1}> ()
        a = Mul(x, two)
        q = Div(a, d)
        y = Sub(zero, q)
        z = Mul(x, ones)
        w = Identity(x)
    }"""
    )
    g2, res = apply(SimplifyAlgebra(), g)
    # x*2 is not x*1; 0-q is not q-0; Div by a non-constant stays; x*ones broadcasts to
    # a bigger shape; Identity(x) -> x would make output w alias input x.
    assert ops(g2) == ["Mul", "Div", "Sub", "Mul", "Identity"]
    assert not res.changed
    assert any("alias" in n for n in res.notes)


def test_signed_zero_hazard_is_optional() -> None:
    text = (
        HEADER
        + """
    g (float[2] x) => (float[2] y) {
        zero = Constant <value = float[1] {0}> ()
        a = Add(x, zero)
        y = Relu(a)
    }"""
    )
    g = graph_of(text)
    strict, res = apply(SimplifyAlgebra(allow_signed_zero_change=False), g)
    assert ops(strict) == ["Add", "Relu"] and not res.changed
    loose, _ = apply(SimplifyAlgebra(), g)
    assert ops(loose) == ["Relu"]
    # The hazard itself: -0.0 + 0.0 is +0.0.
    x = {"x": np.asarray([-0.0, 1.0], np.float32)}
    g_add = graph_of(
        HEADER
        + """
    g (float[2] x) => (float[2] y) {
        zero = Constant <value = float[1] {0}> ()
        y = Add(x, zero)
    }"""
    )
    assert not np.signbit(run_reference(g_add, x)["y"][0])
