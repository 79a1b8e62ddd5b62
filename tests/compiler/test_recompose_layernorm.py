from __future__ import annotations

import pytest

from guard.compiler.passes.recompose_layernorm import RecomposeLayernorm

from ._helpers import HEADER, apply, assert_same_outputs, graph_of, ops

HEADER16 = HEADER.replace('"" : 17', '"" : 16')


def ln_text(
    swap_eps: bool = False,
    swap_mul: bool = False,
    swap_add: bool = False,
    axes: str = "[-1]",
    extra_reader: bool = False,
) -> str:
    eps = "Add(eps, var)" if swap_eps else "Add(var, eps)"
    mul = "Mul(gamma, normed)" if swap_mul else "Mul(normed, gamma)"
    add = "Add(beta, scaled)" if swap_add else "Add(scaled, beta)"
    outs = "float[2, 5, 8] y, float[2, 5, 8] d" if extra_reader else "float[2, 5, 8] y"
    return (
        HEADER16
        + f"""
    g (float[2, 5, 8] x) => ({outs}) {{
        two = Constant <value = float {{2}}> ()
        eps = Constant <value = float {{1e-5}}> ()
        gamma = Constant <value = float[8] {{1, 2, 3, 4, 5, 6, 7, 8}}> ()
        beta = Constant <value = float[8] {{0, 1, 0, 1, 0, 1, 0, 1}}> ()
        mean = ReduceMean <axes = {axes}> (x)
        d = Sub(x, mean)
        sq = Pow(d, two)
        var = ReduceMean <axes = {axes}> (sq)
        ve = {eps}
        std = Sqrt(ve)
        normed = Div(d, std)
        scaled = {mul}
        y = {add}
    }}"""
    )


@pytest.mark.parametrize("swaps", [(False, False, False), (True, True, True), (True, False, True)])
def test_recomposes_with_commuted_operands(swaps: tuple[bool, bool, bool]) -> None:
    g = graph_of(ln_text(*swaps))
    g2, res = apply(RecomposeLayernorm(), g)
    assert ops(g2) == ["LayerNormalization"] and res.stats["num_recomposed"] == 1
    n = g2.nodes[0]
    assert n.inputs[0] == "x" and n.attrs["axis"] == 2 and n.attrs["epsilon"] == pytest.approx(1e-5)
    assert g2.nodes[0].outputs == ["y"]
    assert_same_outputs(g, g2, rtol=1e-5, atol=1e-5)


def test_must_not_fire_on_leading_axes_or_shared_intermediates() -> None:
    g = graph_of(ln_text(axes="[1]"))
    g2, res = apply(RecomposeLayernorm(), g)
    assert "LayerNormalization" not in ops(g2) and not res.changed
    assert any("not the trailing axes" in n for n in res.notes)

    g = graph_of(ln_text(extra_reader=True))  # d is also a graph output
    g2, res = apply(RecomposeLayernorm(), g)
    assert "LayerNormalization" not in ops(g2) and not res.changed
    assert any("read outside the pattern" in n for n in res.notes)


def test_recomposes_after_identity_gamma_and_beta_were_simplified_away() -> None:
    from guard.compiler import optimize

    text = ln_text().replace("{1, 2, 3, 4, 5, 6, 7, 8}", "{1, 1, 1, 1, 1, 1, 1, 1}")
    text = text.replace("{0, 1, 0, 1, 0, 1, 0, 1}", "{0, 0, 0, 0, 0, 0, 0, 0}")
    g = graph_of(text)
    g2, _ = optimize(g, "O1")  # cleanup removes x*1 and x+0 first
    assert "Mul" not in ops(g2)
    g3, res = apply(RecomposeLayernorm(), g2)
    assert ops(g3) == ["LayerNormalization"] and g3.nodes[0].outputs == ["y"]
    assert_same_outputs(g, g3, rtol=1e-5, atol=1e-5)
