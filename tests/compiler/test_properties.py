"""Property tests: random small graphs of supported ops.

For every generated graph: each pass alone and each pipeline keep the outputs (vs the
unoptimised graph, on seeded inputs), the verifier holds after every pass, and the text
form round-trips (print -> parse -> print is the identity, and runs the same).
"""

from __future__ import annotations

import numpy as np
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from guard.compiler import Graph, optimize, parse_graph, print_graph, run_reference, verify
from guard.compiler.ir.isa_table import DEFAULT_TABLE
from guard.compiler.ir.shapes import infer
from guard.compiler.ir.text import INLINE_MAX_ELEMENTS
from guard.compiler.passes.pipeline import PIPELINES, FixedPoint

UNARY = ["Relu", "Neg", "Abs", "Sigmoid", "Tanh", "Erf", "Identity"]
BINARY = ["Add", "Sub", "Mul", "Max", "Min"]


def emit(
    g: Graph, op: str, inputs: list[str], attrs: dict | None = None, n_out: int = 1
) -> list[str]:
    node = g.add_node(op, inputs, [((), np.float32)] * n_out, attrs or {})
    types = infer(node, g)
    assert types is not None
    for o, (shape, dtype) in zip(node.outputs, types, strict=True):
        g.values[o].shape, g.values[o].dtype = tuple(shape), np.dtype(dtype)
    return node.outputs


@st.composite
def graphs(draw: st.DrawFn) -> Graph:
    rng = np.random.default_rng(draw(st.integers(0, 2**16)))
    g = Graph("prop")
    four_d = draw(st.booleans())
    shape = (
        (1, draw(st.sampled_from([2, 4, 16])), 3, 3)
        if four_d
        else (2, draw(st.sampled_from([3, 4])))
    )
    g.add_input("x", shape, np.float32)
    pool = ["x"]

    def const(shape: tuple[int, ...], kind: str = "rand") -> str:
        if kind == "one":
            data = np.ones(shape, np.float32)
        elif kind == "zero":
            data = np.zeros(shape, np.float32)
        else:
            data = rng.uniform(0.5, 1.5, shape).astype(np.float32) * rng.choice(
                [-1, 1], shape
            ).astype(np.float32)
        return g.add_constant(None, data).name

    def same_shape(v: str) -> list[str]:
        return [p for p in pool if g.values[p].shape == g.values[v].shape]

    for _ in range(draw(st.integers(1, 8))):
        v = draw(st.sampled_from(pool))
        vs = g.values[v].shape
        kind = draw(st.sampled_from(["unary", "binary", "const", "div", "layout", "special"]))
        if kind == "unary":
            pool += emit(g, draw(st.sampled_from(UNARY)), [v])
        elif kind == "binary":
            other = draw(st.sampled_from(same_shape(v)))
            pool += emit(g, draw(st.sampled_from(BINARY)), [v, other])
        elif kind == "const":
            c = const((), draw(st.sampled_from(["one", "zero", "rand"])))
            op = draw(st.sampled_from(["Add", "Mul", "Sub"]))
            args = [v, c] if draw(st.booleans()) else [c, v]
            pool += emit(g, op, args)
        elif kind == "div":
            pool += emit(g, "Div", [v, const((), "rand")])
        elif kind == "layout":
            perm = list(rng.permutation(len(vs)))
            (t,) = emit(g, "Transpose", [v], {"perm": [int(p) for p in perm]})
            inv = [int(i) for i in np.argsort(perm)]
            if draw(st.booleans()):
                (t,) = emit(g, "Transpose", [t], {"perm": inv})
            (r,) = emit(g, "Reshape", [t], {"shape": [int(np.prod(vs))]})
            pool += emit(g, "Reshape", [r], {"shape": list(g.values[t].shape)})
        elif len(vs) == 4:
            c = vs[1]
            choice = draw(st.sampled_from(["conv_bn", "concat", "pool", "conv_chain"]))
            if choice == "conv_chain":  # enough convs for assign_layout to re-lay a region
                y = v
                for _ in range(3):
                    w = g.add_constant(
                        None, rng.standard_normal((c, c, 1, 1)).astype(np.float32) * 0.5
                    ).name
                    b = const((c, 1, 1))
                    (y,) = emit(
                        g,
                        "Conv",
                        [y, w],
                        {"group": 1, "pads": [0, 0, 0, 0], "strides": [1, 1], "dilations": [1, 1]},
                    )
                    (y,) = emit(g, "Add", [y, b])
                    (y,) = emit(g, "Relu", [y])
                pool.append(y)
            elif choice == "conv_bn":
                w = g.add_constant(
                    None, rng.standard_normal((c, c, 3, 3)).astype(np.float32) * 0.3
                ).name
                (y,) = emit(
                    g,
                    "Conv",
                    [v, w],
                    {"group": 1, "pads": [1, 1, 1, 1], "strides": [1, 1], "dilations": [1, 1]},
                )
                bn = [
                    const((c,)),
                    const((c,)),
                    const((c,)),
                    g.add_constant(None, rng.uniform(0.5, 2, c).astype(np.float32)).name,
                ]
                pool += emit(g, "BatchNormalization", [y, *bn], {"epsilon": 1e-5})
            elif choice == "concat":
                (cat,) = emit(g, "Concat", [v, draw(st.sampled_from(same_shape(v)))], {"axis": 1})
                pool += emit(g, "Split", [cat], {"axis": 1, "split": [c, c]}, n_out=2)
            else:
                pool += emit(
                    g,
                    "MaxPool",
                    [v],
                    {
                        "kernel_shape": [3, 3],
                        "pads": [1, 1, 1, 1],
                        "strides": [1, 1],
                        "dilations": [1, 1],
                        "ceil_mode": 0,
                    },
                )
        else:
            k = vs[-1]
            choice = draw(st.sampled_from(["siblings", "layernorm", "gelu"]))
            if choice == "siblings":
                for _ in range(2):
                    w = g.add_constant(None, rng.standard_normal((k, k)).astype(np.float32)).name
                    pool += emit(g, "MatMul", [v, w])
            elif choice == "layernorm":
                (mean,) = emit(g, "ReduceMean", [v], {"axes": [len(vs) - 1], "keepdims": 1})
                (d,) = emit(g, "Sub", [v, mean])
                (sq,) = emit(g, "Pow", [d, g.add_constant(None, np.float32(2)).name])
                (var,) = emit(g, "ReduceMean", [sq], {"axes": [len(vs) - 1], "keepdims": 1})
                (ve,) = emit(g, "Add", [g.add_constant(None, np.float32(1e-5)).name, var])
                (sd,) = emit(g, "Sqrt", [ve])
                (nrm,) = emit(g, "Div", [d, sd])
                (sc,) = emit(g, "Mul", [const((k,)), nrm])
                pool += emit(g, "Add", [sc, const((k,))])
            else:
                (s,) = emit(g, "Div", [v, g.add_constant(None, np.float32(np.sqrt(2))).name])
                (e,) = emit(g, "Erf", [s])
                (t,) = emit(g, "Add", [e, g.add_constant(None, np.float32(1)).name])
                (m,) = emit(g, "Mul", [v, t])
                pool += emit(g, "Mul", [m, g.add_constant(None, np.float32(0.5)).name])
    candidates = [p for p in pool if p != "x"] or pool
    outs = draw(st.lists(st.sampled_from(candidates), min_size=1, max_size=3, unique=True))
    if pool[-1] not in outs:
        outs.append(pool[-1])
    g.outputs = outs
    verify(g)
    return g


def _feeds(g: Graph, seed: int) -> dict[str, np.ndarray]:
    v = g.values["x"]
    return {"x": np.random.default_rng(seed).standard_normal(v.shape).astype(np.float32)}


def _assert_same(a: Graph, b: Graph) -> None:
    for seed in (0, 1):
        feeds = _feeds(a, seed)
        ra, rb = run_reference(a, feeds), run_reference(b, feeds)
        assert list(ra) == list(rb)
        for k in ra:
            np.testing.assert_allclose(
                rb[k], ra[k], rtol=1e-4, atol=1e-5, equal_nan=True, err_msg=k
            )


def _all_passes() -> list:
    seen, out = set(), []
    for entry in PIPELINES["O2"](DEFAULT_TABLE):
        items = entry.passes if isinstance(entry, FixedPoint) else [entry]
        for p, why in items:
            if p.name not in seen:
                seen.add(p.name)
                out.append((p, why))
    return out


SETTINGS = settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.too_slow])


@SETTINGS
@given(graphs())
def test_every_pass_alone_preserves_outputs_and_the_verifier(g: Graph) -> None:
    for p, why in _all_passes():
        g2, _ = optimize(g, "custom", verify_each=True, entries=[(p, why)])
        _assert_same(g, g2)


@SETTINGS
@given(graphs())
def test_pipelines_preserve_outputs_and_the_verifier(g: Graph) -> None:
    for name in PIPELINES:
        g2, _ = optimize(g, name, verify_each=True)
        verify(g2)
        _assert_same(g, g2)


@SETTINGS
@given(graphs())
def test_print_parse_round_trips(g: Graph) -> None:
    for graph in (g, optimize(g, "O2")[0]):
        text = print_graph(graph)
        weights = {k: c.data for k, c in graph.constants.items() if c.size > INLINE_MAX_ELEMENTS}
        back = parse_graph(text, weights)
        assert print_graph(back) == text
        verify(back)
        _assert_same(graph, back)
