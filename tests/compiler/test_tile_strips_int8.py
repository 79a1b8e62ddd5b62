"""tile_strips on int8 builds: integer convolutions (QLinearConv, ConvInteger and the
requantise chain that reads its int32 accumulator, ConvTransposeInteger with stride ==
kernel), byte chains and a byte MaxPool run in bands of rows, from the graph input and
from an interior tensor to the graph output (a detector's head); each band's integer
arithmetic is the untiled node's, so the tiled graph equals the untiled one bit for bit
on the reference interpreter, and the tiled generated code equals the untiled build's bit
for bit (the host's class and x86-64-v3, 1 and 2 threads)."""

from __future__ import annotations

import re
from pathlib import Path

import numpy as np
import onnx
import onnx.parser
import pytest
from onnx import numpy_helper

from guard.compiler import run_reference, verify
from guard.compiler.codegen.build import host_target, jit
from guard.compiler.codegen.llvm_target import CodegenTarget
from guard.compiler.ir.core import Graph
from guard.compiler.partition.plan import plan
from guard.compiler.passes.tile_strips import TileStrips, conv_macs, regions
from guard.quantize.fit_hook import quantise_hook

from ._helpers import apply, feeds_for
from .codegen._jit import skip_unless_runnable

# a stem (conv 3x3/2, pool 3x3/2), a residual block
# (its conv an integer conv whose accumulator a float chain reads) and a channel concat, and a detector-like head
# (conv, two transposed convs 2x2/2 up to the input's size, sigmoid)
NET = """
<ir_version: 8, opset_import: ["" : 13]>
net (float[1, 1, 48, 48] x) => (float[1, 1, 48, 48] y) {
    c1 = Conv <pads = [1, 1, 1, 1], strides = [2, 2]> (x, w1, b1)
    r1 = Relu (c1)
    p = MaxPool <kernel_shape = [3, 3], pads = [1, 1, 1, 1], strides = [2, 2]> (r1)
    c2 = Conv <pads = [1, 1, 1, 1]> (p, w2, b2)
    n2 = BatchNormalization (c2, g2, be2, m2, v2)
    a2 = Add (n2, p)
    r2 = Relu (a2)
    cat = Concat <axis = 1> (p, r2)
    c3 = Conv <pads = [1, 1, 1, 1]> (cat, w3, b3)
    r3 = Relu (c3)
    u1 = ConvTranspose <strides = [2, 2]> (r3, w4, b4)
    v1 = Relu (u1)
    u2 = ConvTranspose <strides = [2, 2]> (v1, w5, b5)
    y = Sigmoid (u2)
}
"""
ISAS = ["host", "avx2"]


@pytest.fixture(scope="module")
def net(tmp_path_factory: pytest.TempPathFactory) -> Path:
    rng = np.random.default_rng(0)
    weights = {
        "w1": rng.normal(0, 0.3, (16, 1, 3, 3)), "b1": rng.normal(0, 0.1, 16),
        "w2": rng.normal(0, 0.2, (16, 16, 3, 3)), "b2": rng.normal(0, 0.1, 16),
        "g2": rng.uniform(0.5, 1.5, 16), "be2": rng.normal(0, 0.1, 16),
        "m2": rng.normal(0, 0.1, 16), "v2": rng.uniform(0.5, 1.5, 16),
        "w3": rng.normal(0, 0.2, (8, 32, 3, 3)), "b3": rng.normal(0, 0.1, 8),
        "w4": rng.normal(0, 0.3, (8, 32, 2, 2)), "b4": rng.normal(0, 0.1, 32),
        "w5": rng.normal(0, 0.2, (32, 1, 2, 2)), "b5": rng.normal(0, 0.1, 1),
    }  # fmt: skip
    m = onnx.parser.parse_model(NET)
    m.graph.initializer.extend(
        numpy_helper.from_array(np.asarray(v, np.float32), k) for k, v in weights.items()
    )
    d = tmp_path_factory.mktemp("net")
    onnx.save(m, str(d / "net.onnx"))
    return d / "net.onnx"


def int8(net: Path, target: CodegenTarget, monkeypatch: pytest.MonkeyPatch, tmp: Path) -> Graph:
    """The net quantised (guard.quantize.fit_hook) and optimised for ``target``."""
    monkeypatch.setenv("GUARD_CACHE", str(tmp / "cache"))
    return quantise_hook(net, {}, table=target.table)().graph


def tilings(g: Graph) -> list[tuple[str | None, str, int]]:
    """(entry, exit, strips): the whole net from the input; the head from the tensor the
    last QLinearConv reads (an interior entry) to the graph output."""
    (y,) = g.outputs
    head = next(n for n in reversed(g.nodes) if n.op == "QLinearConv").inputs[0]
    return [(None, y, 4), (None, y, 5), (head, y, 3)]


def test_integer_ops_are_row_local(net, monkeypatch, tmp_path):
    g = int8(net, host_target(), monkeypatch, tmp_path)
    ops = {n.op for n in g.nodes}
    # fuse_integer_epilogue: the residual conv and the first transposed conv write their
    # chains (FusedConvInteger, FusedConvTransposeInteger), the last one to its first byte
    # (its Sigmoid stays a chain)
    fused = {"FusedConvInteger", "FusedConvTransposeInteger"}
    assert {"QLinearConv", "MaxPool", *fused} <= ops
    (pool,) = [n for n in g.nodes if n.op == "MaxPool"]
    assert g.values[pool.inputs[0]].dtype == np.uint8  # pool_bytes: a byte MaxPool
    whole = regions(g)[-1]
    assert whole.exit == g.outputs[0]  # the whole net, input to output, is one region
    inside = {g.nodes[i].op for i in whole.nodes}
    assert {"QLinearConv", "FusedElementwise", *fused} <= inside
    for entry, exit_, strips in tilings(g):
        tiled, res = apply(TileStrips(exit=exit_, strips=strips, entry=entry), g)
        assert res.changed, res.notes
        verify(tiled)
        assert res.stats["num_strips"] == strips
        assert conv_macs(tiled) == conv_macs(g) + res.stats["extra_macs"]
        for op in ("QLinearConv", "FusedConvTransposeInteger"):
            n0 = sum(n.op == op for n in g.nodes)
            assert sum(n.op == op for n in tiled.nodes) > n0  # one per band
        feeds = feeds_for(g)
        want, got = run_reference(g, feeds), run_reference(tiled, feeds)
        np.testing.assert_array_equal(got[exit_], want[exit_])
    # the head alone: the entry stays whole (each band's conv slices its rows and halo out
    # of it) and no output row is computed twice (the halo is only read)
    head, y, _ = tilings(g)[2]
    tiled, res = apply(TileStrips(exit=y, strips=3, entry=head), g)
    assert res.stats["extra_macs"] == 0
    slices = [n for n in tiled.nodes if n.op == "Slice" and n.inputs[0] == head]
    assert [(n.attrs["starts"], n.attrs["ends"]) for n in slices] == [
        ([0], [5]),
        ([3], [9]),
        ([7], [12]),
    ]


def test_transposed_convs_need_no_halo(net, monkeypatch, tmp_path):
    g = int8(net, host_target(), monkeypatch, tmp_path)
    up_ops = ("ConvTransposeInteger", "FusedConvTransposeInteger")
    up = next(n for n in g.nodes if n.op in up_ops).inputs[0]
    (y,) = g.outputs
    tiled, res = apply(TileStrips(exit=y, strips=4, entry=up), g)
    assert res.changed and res.stats["extra_macs"] == 0
    rows = [tiled.values[n.inputs[0]].shape[2] for n in tiled.nodes
            if n.op in up_ops and n.inputs[0].startswith(up)]  # fmt: skip
    assert rows == [3, 3, 3, 3]  # 12 input rows, 48 output rows, 4 bands, no overlap
    feeds = feeds_for(g)
    np.testing.assert_array_equal(run_reference(tiled, feeds)[y], run_reference(g, feeds)[y])


def test_a_padded_or_overlapping_transposed_conv_ends_the_region():
    from guard.compiler.passes.tile_strips import _row_op

    g = Graph()
    g.add_input("x", (1, 4, 8, 8), np.float32)
    for k, s, pads in ((2, 2, [0, 0, 0, 0]), (3, 2, [0, 0, 0, 0]), (2, 2, [1, 1, 1, 1])):
        w = g.add_constant(f"w{k}{s}{pads[0]}", np.zeros((4, 4, k, k), np.float32)).name
        out = (8 - 1) * s + k - 2 * pads[0]
        n = g.add_node("ConvTranspose", ["x", w], [((1, 4, out, out), np.float32)],
                       {"strides": [s, s], "pads": pads, "group": 1, "dilations": [1, 1],
                        "output_padding": [0, 0]})  # fmt: skip
        why = _row_op(g, n, {"x": 2})
        assert (why is None) == (k == s and not pads[0]), why


@pytest.mark.parametrize("isa", ISAS)
def test_generated_code_is_bit_identical(net, monkeypatch, tmp_path, isa):
    target = host_target() if isa == "host" else skip_unless_runnable(isa)
    g = int8(net, target, monkeypatch, tmp_path)
    feeds = feeds_for(g)
    (y,) = g.outputs
    untiled = plan(g)
    want = jit(untiled, target, threads=1)[0].run(feeds)[y]
    # the integer parts are exact; the float sigmoid at the end within an ulp
    np.testing.assert_allclose(want, run_reference(g, feeds)[y], rtol=1e-6, atol=0)
    for entry, exit_, strips in tilings(g)[1:]:
        tiled, _ = apply(TileStrips(exit=exit_, strips=strips, entry=entry), g)
        compiled = plan(tiled)
        assert compiled.partition_report["count"] == 1, dict(compiled.partitions.declines)
        # the head's int32 accumulators (32 x 24 x 24) are the untiled peak
        assert compiled.arena_bytes < untiled.arena_bytes
        rt1, code = jit(compiled, target, threads=1)
        rt2, _ = jit(compiled, target, threads=2, code=code)
        np.testing.assert_array_equal(rt1.run(feeds)[y], want)
        np.testing.assert_array_equal(rt2.run(feeds)[y], want)


def test_quantize_and_dequantize_are_elementwise_unless_quantised_per_row():
    from guard.compiler.passes.tile_strips import _row_op

    g = Graph()
    g.add_input("x", (1, 4, 8, 8), np.float32)
    one = g.add_constant("s", np.float32(0.1)).name
    per_c = g.add_constant("sc", np.full(4, 0.1, np.float32)).name
    per_h = g.add_constant("sh", np.full(8, 0.1, np.float32)).name
    for scale, axis, ok in ((one, 1, True), (per_c, 1, True), (per_h, 2, False)):
        n = g.add_node("QuantizeLinear", ["x", scale], [((1, 4, 8, 8), np.uint8)], {"axis": axis})
        q = n.outputs[0]
        assert (_row_op(g, n, {"x": 2}) is None) == ok
        d = g.add_node("DequantizeLinear", [q, scale], [((1, 4, 8, 8), np.float32)],
                       {"axis": axis})  # fmt: skip
        assert (_row_op(g, d, {q: 2}) is None) == ok


def test_the_int8_rung_tiles_the_int8_build(net, monkeypatch, tmp_path):
    from guard.compiler import import_onnx, optimize
    from guard.compiler.fit.ladder import climb

    monkeypatch.setenv("GUARD_CACHE", str(tmp_path / "cache"))
    table = host_target().table
    fp32 = optimize(import_onnx(net, None), "O2", target=table)[0]
    hook = quantise_hook(net, {}, table=table)
    untiled = plan(hook().graph).arena_bytes
    ladder = climb(fp32, 1024, quantise=hook, stop_at_fit=False, search_s=60)
    int8 = next(s for s in ladder.steps if s.name == "int8")
    assert int8.arena_bytes is not None and int8.arena_bytes < untiled
    assert f"int8 build {untiled / 1024:.1f} KiB" in int8.what
    assert re.search(
        r"tile: strip of \d+ row\(s\) through \S+\.\.\S+ \(\d+ nodes, \d+ strips", int8.what
    )
    assert int8.plan is not None and any("/strip" in n.name for n in int8.plan.graph.nodes)
    assert int8.what.endswith(f"arena {int8.arena_bytes / 1024:.1f} KiB")


def test_entries_of_stems_and_heads(net, monkeypatch, tmp_path):
    from guard.compiler import import_onnx, optimize
    from guard.compiler.passes.tile_entries import entry_axis, head_entries, stem_entries

    g = int8(net, host_target(), monkeypatch, tmp_path)
    (x,) = g.inputs
    (quantise,) = [n for n in g.nodes if x in n.inputs]
    assert stem_entries(g) == quantise.outputs  # the float input dies before the strips
    heads = head_entries(g)
    assert heads[0] == next(n for n in g.nodes if n.outputs == g.outputs).inputs[0]
    assert tilings(g)[2][0] in heads
    # fp32 in NHWC: an entry written by a Transpose to NHWC has its rows on axis 1
    fp32 = optimize(import_onnx(net, None), "O2", target=host_target().table)[0]
    nhwc = [t for t in head_entries(fp32) if entry_axis(fp32, t) == 1]
    assert nhwc and any(r.exit == fp32.outputs[0] for r in regions(fp32, nhwc[0]))


@pytest.mark.parametrize("isa", ISAS)
def test_a_conv_whose_epilogue_reads_its_own_input(net, isa):
    # fp32: the residual block's 3x3 conv adds its own input (FusedConv program arg 0);
    # each band gets that input's rows as one more epilogue operand, not the halo rows
    from guard.compiler import import_onnx, optimize

    target = host_target() if isa == "host" else skip_unless_runnable(isa)
    g = optimize(import_onnx(net, None), "O2", target=target.table)[0]
    (res,) = [n for n in g.nodes if any(0 in st["args"] for st in n.attrs.get("program", []))]
    (y,) = g.outputs
    tiled, r = apply(TileStrips(exit=y, strips=5), g)
    assert r.changed, r.notes
    bands = [n for n in tiled.nodes if n.name.startswith(f"{res.name}/strip")]
    assert len(bands) == 5 and all(len(n.inputs) == len(res.inputs) + 1 for n in bands)
    feeds = feeds_for(g)
    np.testing.assert_allclose(
        run_reference(tiled, feeds)[y], run_reference(g, feeds)[y], rtol=1e-5, atol=1e-6
    )
    want = jit(plan(g), target, threads=1)[0].run(feeds)[y]
    rt1, code = jit(plan(tiled), target, threads=1)
    rt2, _ = jit(plan(tiled), target, threads=2, code=code)
    np.testing.assert_array_equal(rt1.run(feeds)[y], want)
    np.testing.assert_array_equal(rt2.run(feeds)[y], want)


# a stem (three convs at full size) and a head (two transposed convs), split by a
# squeeze-excite Mul that reads a pooled tensor (no row-local op): two regions
NET2 = """
<ir_version: 8, opset_import: ["" : 13]>
net (float[1, 1, 64, 64] x) => (float[1, 1, 128, 128] y) {
    c1 = Conv <pads = [1, 1, 1, 1]> (x, w1, b1)
    r1 = Relu (c1)
    c2 = Conv <pads = [1, 1, 1, 1]> (r1, w2, b2)
    r2 = Relu (c2)
    c3 = Conv <pads = [1, 1, 1, 1], strides = [2, 2]> (r2, w3, b3)
    r3 = Relu (c3)
    g = GlobalAveragePool (r3)
    s = Sigmoid (g)
    m = Mul (r3, s)
    c4 = Conv <pads = [1, 1, 1, 1]> (m, w4, b4)
    r4 = Relu (c4)
    u1 = ConvTranspose <strides = [2, 2]> (r4, w5, b5)
    v1 = Relu (u1)
    u2 = ConvTranspose <strides = [2, 2]> (v1, w6, b6)
    y = Sigmoid (u2)
}
"""


def test_the_int8_rung_tiles_a_stem_and_a_head(tmp_path, monkeypatch):
    from guard.compiler import import_onnx, optimize
    from guard.compiler.fit.ladder import climb

    rng = np.random.default_rng(0)
    shapes = {"w1": (16, 1, 3, 3), "w2": (32, 16, 3, 3), "w3": (16, 32, 3, 3),
              "w4": (8, 16, 3, 3), "w5": (8, 32, 2, 2), "w6": (32, 1, 2, 2), "b1": (16,),
              "b2": (32,), "b3": (16,), "b4": (8,), "b5": (32,), "b6": (1,)}  # fmt: skip
    m = onnx.parser.parse_model(NET2)
    m.graph.initializer.extend(
        numpy_helper.from_array(rng.normal(0, 0.3 if k[0] == "w" else 0.1, s).astype(np.float32), k)
        for k, s in shapes.items()
    )
    onnx.save(m, str(tmp_path / "net2.onnx"))
    monkeypatch.setenv("GUARD_CACHE", str(tmp_path / "cache"))
    table = host_target().table
    fp32 = optimize(import_onnx(tmp_path / "net2.onnx", None), "O2", target=table)[0]
    hook = quantise_hook(tmp_path / "net2.onnx", {}, table=table)
    g = hook().graph
    ladder = climb(fp32, 1024, quantise=hook, stop_at_fit=False, search_s=60)
    int8 = next(s for s in ladder.steps if s.name == "int8")
    assert int8.plan is not None and int8.arena_bytes is not None
    # The stem's and the head's peaks are equal (the integer convs' chains fused: no
    # int32 accumulator): neither region alone lowers the arena, the head then the stem
    # do; the fp32 rung 4 the same
    untiled = plan(g).arena_bytes
    for step in (int8, ladder.steps[3]):
        head, stem = re.findall(r"strip of \d+ row\(s\) through (\S+)\.\.(\S+) ", step.what)
        assert head[1].startswith("u2") and stem[1].startswith("c3"), step.what
    assert int8.arena_bytes * 2 < untiled
    assert ladder.steps[3].arena_bytes * 4 < ladder.steps[0].arena_bytes
    feeds = feeds_for(g)
    (y,) = g.outputs
    np.testing.assert_array_equal(
        run_reference(int8.plan.graph, feeds)[y], run_reference(g, feeds)[y]
    )


# a detector's neck: a coarse map upsampled by a nearest Resize, joined to a fine one
NET3 = """
<ir_version: 8, opset_import: ["" : 13]>
net (float[1, 1, 32, 32] x) => (float[1, 1, 64, 64] y) {
    c1 = Conv <pads = [1, 1, 1, 1], strides = [2, 2]> (x, w1, b1)
    a = Relu (c1)
    c2 = Conv <pads = [1, 1, 1, 1], strides = [2, 2]> (a, w2, b2)
    b = Relu (c2)
    up = Resize <mode = "nearest", coordinate_transformation_mode = "asymmetric",
                 nearest_mode = "floor"> (b, , sc)
    cat = Concat <axis = 1> (up, a)
    c3 = Conv <pads = [1, 1, 1, 1]> (cat, w3, b3)
    r3 = Relu (c3)
    u = ConvTranspose <strides = [4, 4]> (r3, w4, b4)
    y = Sigmoid (u)
}
"""


def _net3(tmp_path: Path) -> Path:
    rng = np.random.default_rng(1)
    shapes = {"w1": (8, 1, 3, 3), "w2": (8, 8, 3, 3), "w3": (8, 16, 3, 3),
              "w4": (8, 1, 4, 4), "b1": (8,), "b2": (8,), "b3": (8,), "b4": (1,)}  # fmt: skip
    m = onnx.parser.parse_model(NET3)
    m.graph.initializer.extend(
        numpy_helper.from_array(rng.normal(0, 0.3, s).astype(np.float32), k)
        for k, s in shapes.items()
    )
    m.graph.initializer.append(numpy_helper.from_array(np.array([1, 1, 2, 2], np.float32), "sc"))
    onnx.save(m, str(tmp_path / "net3.onnx"))
    return tmp_path / "net3.onnx"


@pytest.mark.parametrize("isa", ISAS)
def test_a_head_from_several_entries_through_a_nearest_resize(tmp_path, monkeypatch, isa):
    from guard.compiler import import_onnx, optimize
    from guard.compiler.passes.tile_entries import head_entries, head_fronts

    target = host_target() if isa == "host" else skip_unless_runnable(isa)
    path = _net3(tmp_path)
    fp32 = optimize(import_onnx(path, None), "O2", target=target.table)[0]
    for g in (int8(path, target, monkeypatch, tmp_path), fp32):
        (y,) = g.outputs
        fronts = head_fronts(g, head_entries(g)[-1])
        assert fronts, [n.op for n in g.nodes]
        entries = fronts[-1]  # before the Resize: the coarse map and the fine one
        resize = next(n for n in g.nodes if n.op == "Resize")
        assert len(entries) == 2 and resize.inputs[0] in entries
        tiled, res = apply(TileStrips(exit=y, strips=3, entry=entries), g)
        assert res.changed, res.notes
        bands = [n for n in tiled.nodes if n.op == "Resize"]
        assert len(bands) == 3 and all(
            tiled.values[n.outputs[0]].shape[2] == 2 * tiled.values[n.inputs[0]].shape[2]
            for n in bands
        )
        feeds = feeds_for(g)
        want, got = run_reference(g, feeds)[y], run_reference(tiled, feeds)[y]
        if g is fp32:  # numpy's float GEMM blocking follows the rows
            np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)
        else:
            np.testing.assert_array_equal(got, want)
        native = jit(plan(g), target, threads=1)[0].run(feeds)[y]
        rt1, code = jit(plan(tiled), target, threads=1)
        rt2, _ = jit(plan(tiled), target, threads=2, code=code)
        np.testing.assert_array_equal(rt1.run(feeds)[y], native)
        np.testing.assert_array_equal(rt2.run(feeds)[y], native)
