"""Golden text: a small encoder block and a conv block, printed after O2.

Any change in what the pipeline produces (a pass that stops firing, a new transpose, a
renamed value) shows as a diff of the golden file. Regenerate deliberately with
GUARD_UPDATE_GOLDEN=1 and review the diff like code.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from guard.compiler import optimize, parse_graph, print_graph

from ._helpers import assert_same_outputs, graph_of

GOLDEN = Path(__file__).with_name("golden")

MODELS = {
    "encoder_block": """<ir_version: 8, opset_import: ["" : 16]>
enc (float[1, 4, 8] x) => (float[1, 4, 8] y) {
    w1 = Constant <value = float[8, 8] {
        0.1, -0.2, 0.3, 0.0, 0.5, -0.1, 0.2, 0.1, 0.0, 0.1, -0.3, 0.2, 0.1, 0.0, 0.4, -0.2,
        0.2, 0.1, 0.0, -0.1, 0.3, 0.2, -0.2, 0.1, -0.1, 0.2, 0.1, 0.3, 0.0, -0.3, 0.1, 0.2,
        0.3, 0.0, 0.2, -0.2, 0.1, 0.1, 0.0, -0.1, 0.0, -0.1, 0.2, 0.1, -0.2, 0.3, 0.1, 0.0,
        0.2, 0.2, -0.1, 0.0, 0.1, -0.2, 0.3, 0.1, -0.3, 0.1, 0.0, 0.2, 0.2, 0.1, -0.1, 0.3}> ()
    b1 = Constant <value = float[8] {0.1, 0, -0.1, 0.2, 0, 0.1, -0.2, 0}> ()
    two = Constant <value = float {2}> ()
    eps = Constant <value = float {1e-5}> ()
    g = Constant <value = float[8] {1, 1, 1, 1, 1, 1, 1, 1}> ()
    be = Constant <value = float[8] {0, 0, 0, 0, 0, 0, 0, 0}> ()
    sq2 = Constant <value = float {1.4142135}> ()
    one = Constant <value = float {1}> ()
    half = Constant <value = float {0.5}> ()
    h = MatMul(x, w1)
    hb = Add(h, b1)
    s = Div(hb, sq2)
    e = Erf(s)
    t = Add(e, one)
    m = Mul(hb, t)
    act = Mul(m, half)
    r = Add(act, x)
    mean = ReduceMean <axes = [-1]> (r)
    d = Sub(r, mean)
    p = Pow(d, two)
    var = ReduceMean <axes = [-1]> (p)
    ve = Add(var, eps)
    sd = Sqrt(ve)
    n = Div(d, sd)
    sc = Mul(n, g)
    y = Add(sc, be)
}""",
    "conv_block": """<ir_version: 8, opset_import: ["" : 13]>
conv (float[1, 16, 6, 6] x) => (float[1, 16] y) {
    w = Constant <value = float[16, 16, 1, 1] {
        0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8, 0.9, 1.0, 1.1, 1.2, 1.3, 1.4, 1.5, 1.6,
        0.2, 0.1, 0.4, 0.3, 0.6, 0.5, 0.8, 0.7, 1.0, 0.9, 1.2, 1.1, 1.4, 1.3, 1.6, 1.5,
        0.1, 0.1, 0.1, 0.1, 0.1, 0.1, 0.1, 0.1, 0.1, 0.1, 0.1, 0.1, 0.1, 0.1, 0.1, 0.1,
        0.2, 0.2, 0.2, 0.2, 0.2, 0.2, 0.2, 0.2, 0.2, 0.2, 0.2, 0.2, 0.2, 0.2, 0.2, 0.2,
        0.3, 0.3, 0.3, 0.3, 0.3, 0.3, 0.3, 0.3, 0.3, 0.3, 0.3, 0.3, 0.3, 0.3, 0.3, 0.3,
        0.4, 0.4, 0.4, 0.4, 0.4, 0.4, 0.4, 0.4, 0.4, 0.4, 0.4, 0.4, 0.4, 0.4, 0.4, 0.4,
        0.5, 0.5, 0.5, 0.5, 0.5, 0.5, 0.5, 0.5, 0.5, 0.5, 0.5, 0.5, 0.5, 0.5, 0.5, 0.5,
        0.6, 0.6, 0.6, 0.6, 0.6, 0.6, 0.6, 0.6, 0.6, 0.6, 0.6, 0.6, 0.6, 0.6, 0.6, 0.6,
        -0.1, -0.1, -0.1, -0.1, -0.1, -0.1, -0.1, -0.1, -0.1, -0.1, -0.1, -0.1, -0.1, -0.1, -0.1, -0.1,
        -0.2, -0.2, -0.2, -0.2, -0.2, -0.2, -0.2, -0.2, -0.2, -0.2, -0.2, -0.2, -0.2, -0.2, -0.2, -0.2,
        -0.3, -0.3, -0.3, -0.3, -0.3, -0.3, -0.3, -0.3, -0.3, -0.3, -0.3, -0.3, -0.3, -0.3, -0.3, -0.3,
        -0.4, -0.4, -0.4, -0.4, -0.4, -0.4, -0.4, -0.4, -0.4, -0.4, -0.4, -0.4, -0.4, -0.4, -0.4, -0.4,
        0.0, 0.1, 0.0, 0.1, 0.0, 0.1, 0.0, 0.1, 0.0, 0.1, 0.0, 0.1, 0.0, 0.1, 0.0, 0.1,
        0.1, 0.0, 0.1, 0.0, 0.1, 0.0, 0.1, 0.0, 0.1, 0.0, 0.1, 0.0, 0.1, 0.0, 0.1, 0.0,
        0.5, -0.5, 0.5, -0.5, 0.5, -0.5, 0.5, -0.5, 0.5, -0.5, 0.5, -0.5, 0.5, -0.5, 0.5, -0.5,
        -0.5, 0.5, -0.5, 0.5, -0.5, 0.5, -0.5, 0.5, -0.5, 0.5, -0.5, 0.5, -0.5, 0.5, -0.5, 0.5}> ()
    s = Constant <value = float[16] {1, 2, 1, 2, 1, 2, 1, 2, 1, 2, 1, 2, 1, 2, 1, 2}> ()
    b = Constant <value = float[16] {0, 1, 0, 1, 0, 1, 0, 1, 0, 1, 0, 1, 0, 1, 0, 1}> ()
    m = Constant <value = float[16] {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0}> ()
    v = Constant <value = float[16] {1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1}> ()
    c1 = Conv(x, w)
    n1 = BatchNormalization(c1, s, b, m, v)
    r1 = Relu(n1)
    c2 = Conv(r1, w)
    r2 = Relu(c2)
    c3 = Conv(r2, w)
    res = Add(c3, r1)
    r3 = Relu(res)
    p = GlobalAveragePool(r3)
    y = Flatten(p)
}""",
}


@pytest.mark.parametrize("name", sorted(MODELS))
def test_o2_text_matches_golden(name: str) -> None:
    g = graph_of(MODELS[name])
    g2, _ = optimize(g, "O2", verify_each=True)
    text = print_graph(g2)
    path = GOLDEN / f"{name}.O2.ir"
    if os.environ.get("GUARD_UPDATE_GOLDEN"):
        GOLDEN.mkdir(exist_ok=True)
        path.write_text(text)
    assert path.is_file(), f"missing {path}; run with GUARD_UPDATE_GOLDEN=1 and review it"
    assert text == path.read_text(), f"O2 output of {name} changed; diff against {path}"
    weights = {
        k: c.data
        for k, c in g2.constants.items()
        if "external" in text.split(f"const {k}:")[-1].split("\n")[0]
    }
    assert_same_outputs(g, parse_graph(path.read_text(), weights), rtol=1e-5, atol=1e-5)
