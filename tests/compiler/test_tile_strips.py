"""tile_strips (rung 4 of the budget ladder): bands of rows through the first stages.

The fixture is a small CNN head: conv 3x3/2 + relu, depthwise 3x3, maxpool 3x3/2, a 1x1
conv, a channel concat of two branches, then a global pool (not row-local: the region
ends there). Tiling must keep every output (the reference interpreter's, and the
generated code's bit for bit), shrink the arena, and decline what it cannot tile.
"""

from __future__ import annotations

import tempfile

import numpy as np
import onnx
from onnx import TensorProto, helper

from guard.compiler import import_onnx, optimize, run_reference, verify
from guard.compiler.codegen.llvm_target import codegen_target
from guard.compiler.partition.plan import plan
from guard.compiler.passes.tile_strips import TileStrips, conv_macs, regions
from guard.compiler.runtime.artefact import load_artefact, save_artefact

from ._helpers import apply, assert_same_outputs, feeds_for

SIZE = 64


def cnn(ceil_mode: int = 0, leak: bool = False) -> onnx.ModelProto:
    rng = np.random.default_rng(0)

    def w(name: str, shape: tuple[int, ...]) -> onnx.TensorProto:
        return helper.make_tensor(
            name, TensorProto.FLOAT, shape, rng.standard_normal(shape).astype(np.float32) * 0.3
        )

    inits = [w("w1", (16, 3, 3, 3)), w("w2", (16, 1, 3, 3)), w("w3", (8, 16, 1, 1)),
             w("w4", (8, 16, 3, 3)), w("b1", (16,))]  # fmt: skip
    nodes = [
        helper.make_node("Conv", ["x", "w1", "b1"], ["c1"], strides=[2, 2], pads=[1, 1, 1, 1]),
        helper.make_node("Relu", ["c1"], ["r1"]),
        helper.make_node("Conv", ["r1", "w2"], ["c2"], group=16, pads=[1, 1, 1, 1]),
        helper.make_node("MaxPool", ["c2"], ["p"], kernel_shape=[3, 3], strides=[2, 2],
                         pads=[1, 1, 1, 1], ceil_mode=ceil_mode),
        helper.make_node("Conv", ["p", "w3"], ["a"]),
        helper.make_node("Conv", ["p", "w4"], ["b"], pads=[1, 1, 1, 1]),
        helper.make_node("Concat", ["a", "b"], ["cat"], axis=1),
        helper.make_node("GlobalAveragePool", ["cat"], ["y"]),
    ]  # fmt: skip
    outputs = [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 16, 1, 1])]
    if leak:  # r1 also leaves the region: it would have to exist whole
        nodes.append(helper.make_node("GlobalMaxPool", ["r1"], ["z"]))
        outputs.append(helper.make_tensor_value_info("z", TensorProto.FLOAT, [1, 16, 1, 1]))
    graph = helper.make_graph(
        nodes, "cnn",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, SIZE, SIZE])],
        outputs, inits,
    )  # fmt: skip
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def test_regions_follow_row_local_ops_and_stop_at_the_global_pool():
    g = import_onnx(cnn(), None)
    exits = [r.exit for r in regions(g)]
    assert exits == ["c1", "r1", "c2", "p", "cat"]  # a and b both leave p's region open


def test_tiling_structure_and_outputs():
    g = import_onnx(cnn(), None)
    tiled, res = apply(TileStrips(exit="cat", strips=4), g)
    assert res.changed and res.stats["num_strips"] == 4
    joins = [n for n in tiled.nodes if n.outputs == ["cat"]]
    assert joins[0].op == "Concat" and joins[0].attrs["axis"] == 2
    assert sum(1 for n in tiled.nodes if n.op == "Conv") == 4 * 4  # each conv per band
    # the halo: 1+2+... rows per band boundary computed twice, never fewer MACs
    assert res.stats["extra_macs"] > 0
    assert conv_macs(tiled) == conv_macs(g) + res.stats["extra_macs"]
    # the depthwise conv (stride 1, pad 1): the first band pads at the top only, the last
    # at the bottom only, the inner ones not at all
    pads = [n.attrs["pads"] for n in tiled.nodes if n.outputs[0].startswith("c2/strip")]
    assert [(p[0], p[2]) for p in pads] == [(1, 0), (0, 0), (0, 0), (0, 1)]
    assert_same_outputs(g, tiled, rtol=1e-5, atol=1e-5)


def test_tiling_lowers_the_arena_in_blocked_layouts():
    g = import_onnx(cnn(), None)
    opt, _ = optimize(g, "O2", target=codegen_target("host").table)
    region = regions(opt)[-1]
    tiled, res = apply(TileStrips(exit=region.exit, strips=8), opt)
    assert res.changed
    assert plan(tiled).arena_bytes < plan(opt).arena_bytes
    feeds = feeds_for(opt)
    want, got = run_reference(opt, feeds), run_reference(tiled, feeds)
    np.testing.assert_allclose(got["y"], want["y"], rtol=1e-5, atol=1e-5)


def test_generated_code_is_bit_identical():
    g = import_onnx(cnn(), None)
    opt, _ = optimize(g, "O2", target=codegen_target("host").table)
    tiled, _ = apply(TileStrips(exit=regions(opt)[-1].exit, strips=4), opt)
    feeds = feeds_for(opt)
    outs = []
    for graph in (opt, tiled):
        with tempfile.TemporaryDirectory() as d:
            save_artefact(plan(graph), d)
            outs.append(load_artefact(d).runtime().run(feeds))
    np.testing.assert_array_equal(outs[1]["y"], outs[0]["y"])


def test_declines_what_it_cannot_tile():
    # ceil_mode pooling ends the region before the pool
    g = import_onnx(cnn(ceil_mode=1), None)
    assert [r.exit for r in regions(g)] == ["c1", "r1", "c2"]
    # r1 leaves the region: no exit past it is a region (it would exist whole anyway)
    leaky = import_onnx(cnn(leak=True), None)
    assert "cat" not in [r.exit for r in regions(leaky)]
    same, res = apply(TileStrips(exit="cat", strips=4), leaky)
    assert not res.changed and "no row-local region" in res.notes[0]
    verify(same)


def test_first_stage_peak_drops_by_tiling():
    from guard.compiler.fit.describe import tiled_stage_peaks

    g = import_onnx(cnn(), None)
    tiled, _ = apply(TileStrips(exit="cat", strips=8), g)
    before, after = tiled_stage_peaks(plan(g), plan(tiled)) or (0, 0)
    # untiled: x (48 KiB) and c1 (64 KiB, relu in place) then c1 and c2 (64 KiB each) live
    # together: 128 KiB; tiled: x stays whole (the bands slice it), the bands and the 16 KiB
    # exit twice (the bands' parts and the row Concat) are what remains
    assert before == 128 * 1024
    assert 0 < after < before
    assert tiled_stage_peaks(plan(g), plan(g)) is None


def test_a_relayout_to_nhwc_ends_the_region_even_on_a_square_image():
    from guard.compiler.ir.core import Graph
    from guard.compiler.passes.tile_strips import _row_op

    g = Graph()
    g.add_input("x", (1, 16, 8, 8), np.float32)
    to_nhwc = g.add_node("Relayout", ["x"], [((1, 8, 8, 16), np.float32)],
                         {"from": "NCHW", "to": "NHWC"})  # fmt: skip
    to_blocked = g.add_node("Relayout", ["x"], [((1, 1, 8, 8, 16), np.float32)],
                            {"from": "NCHW", "to": "NCHW16c"})  # fmt: skip
    assert _row_op(g, to_nhwc, {"x": 2}) == "relayout moves the row axis"
    h = {"x": 2}
    assert _row_op(g, to_blocked, h) is None and h[to_blocked.outputs[0]] == 2
