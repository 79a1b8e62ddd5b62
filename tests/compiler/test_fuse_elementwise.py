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


def test_long_chain_is_fused_in_linear_work(monkeypatch) -> None:
    """A 3000-op chain: consumers are computed once and the node list rebuilt once.

    Recomputing both per fused chain made a 10^5-node chain take minutes (issue 16).
    The work is counted, not timed; benchmarks/ has the seconds.
    """
    from guard.compiler.ir.core import Graph

    n = 3000
    body = "\n".join(f"        t{i + 1} = {('Relu', 'Neg', 'Abs')[i % 3]}(t{i})" for i in range(n))
    g = graph_of(
        HEADER
        + f"""
    g (float[4] t0) => (float[4] t{n}) {{
{body}
    }}"""
    )
    calls = {"consumers": 0}
    real = Graph.consumers

    def counting(self):
        calls["consumers"] += 1
        return real(self)

    monkeypatch.setattr(Graph, "consumers", counting)
    g2, res = apply(FuseElementwise(max_steps=32), g)
    assert calls["consumers"] <= 2  # once per run (apply may verify once)
    assert ops(g2) == ["FusedElementwise"] * -(-n // 32)
    assert res.stats["num_ops_fused"] == n
    assert g2.nodes[-1].outputs == [f"t{n}"]
