from __future__ import annotations

from guard.compiler.passes.elide_concat import ElideConcat

from ._helpers import HEADER, apply, assert_same_outputs, graph_of


def test_marks_views_where_placement_is_possible_and_explains_the_rest() -> None:
    g = graph_of(
        HEADER
        + """
    g (float[1, 4, 3] x, float[2, 4] z) => (float[1, 8, 3] y, float[1, 24] f, float[4, 4] zz) {
        a = Relu(x)
        b = Neg(x)
        y = Concat <axis = 1> (a, b)
        f = Flatten(y)
        zz = Concat <axis = 0> (z, z)
    }"""
    )
    g2, res = apply(ElideConcat(), g)
    marks = {n.op: n.attrs.get("view") for n in g2.nodes}
    concats = [n for n in g2.nodes if n.op == "Concat"]
    assert concats[0].attrs["view"] == "concat"  # a and b are each read once, outer dim 1
    assert "view" not in concats[1].attrs  # inputs are graph inputs
    assert marks["Reshape"] == "alias"
    assert res.stats["num_concats"] == 1 and res.stats["num_views"] == 1
    assert any("graph input or constant" in n for n in res.notes)
    assert_same_outputs(g, g2, rtol=0, atol=0)


def test_output_aliasing_an_input_is_not_a_view() -> None:
    g = graph_of(HEADER + "g (float[1, 4, 3] x) => (float[1, 12] f) { f = Flatten(x) }")
    g2, res = apply(ElideConcat(), g)
    assert "view" not in g2.nodes[0].attrs
    assert any("may not alias a graph input" in n for n in res.notes)


def test_strided_concat_is_not_marked() -> None:
    g = graph_of(
        HEADER
        + """
    g (float[2, 3] x) => (float[2, 6] y) {
        a = Relu(x)
        b = Neg(x)
        y = Concat <axis = 1> (a, b)
    }"""
    )
    g2, res = apply(ElideConcat(), g)
    assert "view" not in g2.nodes[-1].attrs and not res.changed
    assert any("not all 1" in n for n in res.notes)
