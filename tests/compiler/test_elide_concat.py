from __future__ import annotations

from guard.compiler.passes.elide_concat import ElideConcat

from ._helpers import HEADER, apply, assert_same_outputs, graph_of


def test_marks_views_where_placement_is_possible_and_explains_the_rest() -> None:
    # x stays live to the end (r reads it), so a and b get buffers of their own; each is
    # 16 floats = 64 bytes, so b's slice starts aligned.
    g = graph_of(
        HEADER
        + """
    g (float[1, 16, 1] x, float[2, 4] z) => (float[1, 32] f, float[4, 4] zz, float[1, 16, 1] r) {
        a = Relu(x)
        b = Neg(x)
        y = Concat <axis = 1> (a, b)
        f = Flatten(y)
        zz = Concat <axis = 0> (z, z)
        r = Sigmoid(x)
    }"""
    )
    g2, res = apply(ElideConcat(), g)
    marks = {n.op: n.attrs.get("view") for n in g2.nodes}
    concats = [n for n in g2.nodes if n.op == "Concat"]
    assert concats[0].attrs["view"] == "concat"
    assert "view" not in concats[1].attrs  # an input appears twice (and is a graph input)
    assert marks["Reshape"] == "alias"
    assert res.stats["num_concats"] == 1 and res.stats["num_views"] == 1
    assert any("appears twice" in n for n in res.notes)
    assert_same_outputs(g, g2, rtol=0, atol=0)


def test_marks_are_the_memory_plans_answer() -> None:
    # One truth: the pass marks exactly the nodes the planner elides, nothing of its own.
    from guard.compiler.graph.memory import plan_memory
    from guard.compiler.graph.view import view_of_graph

    g = graph_of(
        HEADER
        + """
    g (float[1, 4, 3] x) => (float[1, 24] f, float[1, 4, 3] r) {
        a = Relu(x)
        b = Neg(x)
        y = Concat <axis = 1> (a, b)
        f = Flatten(y)
        r = Relu(b)
    }"""
    )
    g2, _ = apply(ElideConcat(), g)
    mem = plan_memory(view_of_graph(g2))
    view = view_of_graph(g2)
    marked = {vn.name for n, vn in zip(g2.nodes, view.nodes, strict=True) if "view" in n.attrs}
    assert marked == set(mem.elided_nodes) and marked


def test_a_const_input_stays_a_copy_with_the_planners_reason() -> None:
    g = graph_of(
        HEADER
        + """
    g (float[1, 4] x) => (float[1, 8] y) {
        a = Relu(x)
        y = Concat <axis = 1> (a, a)
    }"""
    )
    g2, res = apply(ElideConcat(), g)
    assert "view" not in g2.nodes[-1].attrs and not res.changed
    assert any("appears twice" in n for n in res.notes)


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
