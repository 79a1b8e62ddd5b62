from __future__ import annotations

import pytest

from guard.compiler.passes.recompose_gelu import RecomposeGelu

from ._helpers import HEADER, apply, assert_same_outputs, graph_of, ops

FORMS = {
    "torch": "a = Mul(x, t)\n y = Mul(a, half)",
    "half_first": "a = Mul(x, half)\n y = Mul(t, a)",
    "half_on_t": "a = Mul(half, t)\n y = Mul(x, a)",
}


def gelu_text(form: str, scale: str = "Div(x, sqrt2)", one: str = "1") -> str:
    return (
        HEADER
        + f"""
    g (float[4, 16] x) => (float[4, 16] y) {{
        sqrt2 = Constant <value = float {{1.4142135}}> ()
        rsqrt2 = Constant <value = float {{0.70710677}}> ()
        c1 = Constant <value = float {{{one}}}> ()
        half = Constant <value = float {{0.5}}> ()
        s = {scale}
        e = Erf(s)
        t = Add(e, c1)
        {FORMS[form]}
    }}"""
    )


@pytest.mark.parametrize("form", sorted(FORMS))
@pytest.mark.parametrize("scale", ["Div(x, sqrt2)", "Mul(rsqrt2, x)"])
def test_recomposes_each_form(form: str, scale: str) -> None:
    g = graph_of(gelu_text(form, scale))
    g2, res = apply(RecomposeGelu(), g)
    assert ops(g2) == ["Gelu"] and g2.nodes[0].inputs == ["x"] and g2.nodes[0].outputs == ["y"]
    assert res.stats["num_recomposed"] == 1
    assert_same_outputs(g, g2, rtol=1e-5, atol=1e-6)


def test_must_not_fire_when_the_constant_is_wrong() -> None:
    g = graph_of(gelu_text("torch", one="2"))
    g2, res = apply(RecomposeGelu(), g)
    assert "Gelu" not in ops(g2) and "Erf" in ops(g2) and not res.changed
    assert any("not followed by + 1" in n for n in res.notes)
