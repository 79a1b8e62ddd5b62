"""Steps the channel split cannot cut, on N threads: convolutions in NHWC, grouped (a residual
read by the epilogue too) or with a scalar epilogue cut into bands of output rows, Transposes into bands of their output,
elementwise steps cut flat, LRN by runs of channels (beside one-row GEMMs); outputs bit-identical for any N and equal to the reference (as test_threads.py
checks for the channel split)."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import helper

from guard.compiler import import_onnx, optimize, run_reference
from guard.compiler.codegen import split, split_cuts
from guard.compiler.codegen.build import jit
from guard.compiler.codegen.conv.schedule import tensor_reads
from guard.compiler.codegen.kernel_plan import Operand, Step
from guard.compiler.ir.isa_table import table_for
from guard.compiler.partition.plan import plan

from ._jit import TARGETS, skip_unless_runnable
from .test_emitters import model, rnd


def _net() -> onnx.ModelProto:
    """12 channels (no whole channel block on either x86 class: an NHWC region): a 3x3
    conv, a grouped conv, a 1x1 conv whose epilogue reads a scalar scale and shift (the
    learnable affine of PP-OCR's blocks), a residual Add, a transpose back to NCHW."""
    nodes = [
        helper.make_node("Conv", ["x", "w0"], ["a"], pads=[1, 1, 1, 1]),
        helper.make_node("Conv", ["a", "w1"], ["b"], pads=[1, 1, 1, 1], group=3),
        helper.make_node("Conv", ["b", "w2", "b2"], ["c"]),
        helper.make_node("Mul", ["c", "s"], ["m"]),
        helper.make_node("Add", ["m", "t"], ["d"]),
        helper.make_node("Conv", ["d", "w3"], ["e"], pads=[1, 1, 1, 1], strides=[2, 2]),
        helper.make_node("Sigmoid", ["e"], ["y"]),
    ]
    weights = [("w0", rnd(12, 5, 3, 3)), ("w1", rnd(12, 4, 3, 3)), ("w2", rnd(12, 12, 1, 1)),
               ("b2", rnd(12)), ("s", rnd(1)), ("t", rnd(1)), ("w3", rnd(12, 12, 3, 3))]  # fmt: skip
    return model(nodes, [("x", [1, 5, 14, 14])], ["y"], weights)


def split_on_threads(m: onnx.ModelProto, isa: str, monkeypatch, outputs=("y",)) -> list:
    """Every step split (the cost rule's floor lowered), the plan run on 1, 2 and 3
    threads: the same bits each time, equal to the reference within tolerance; the
    generated code of each run (its plan, for the caller to read)."""
    target = skip_unless_runnable(isa)
    monkeypatch.setattr(split, "MIN_TASK_FLOPS", 1)
    g0 = import_onnx(m, {})
    g, _ = optimize(g0, "O2", target=table_for(isa))
    compiled = plan(g)
    assert compiled.partition_report["count"] == 1, compiled.partition_text()
    rng = np.random.default_rng(0)
    feeds = {k: rng.standard_normal(g0.values[k].shape).astype(np.float32) for k in g0.inputs}
    runs = [jit(compiled, target, threads=threads) for threads in (1, 2, 3)]
    outs = [rt.run(feeds) for rt, _ in runs]
    ref = run_reference(g0, feeds)
    for k in outputs:
        assert all(np.array_equal(outs[0][k], o[k]) for o in outs[1:]), k
        np.testing.assert_allclose(outs[0][k], ref[k], rtol=1e-4, atol=1e-4, err_msg=k)
    return [code for _, code in runs]


@pytest.mark.parametrize("isa", list(TARGETS))
def test_row_bands_are_bit_identical_for_any_thread_count(isa, monkeypatch):
    for code in split_on_threads(_net(), isa, monkeypatch):
        convs = [s for s in code.plan.steps() if "Conv" in s.op]
        assert len(convs) == 4 and all(len(s.parts) >= 2 for s in convs)
        assert all("rows" in t.attrs for s in convs for t in s.parts)
        assert {s.attrs["layout"] for s in convs} == {"NHWC"}
        assert any(s.attrs["group"] == 3 for s in convs)
        fused = [s for s in convs if s.op == "FusedConv"]
        assert fused and all(s.attrs["program"] for s in fused)  # the scalar epilogue
        # the conversion into the region: bands of the output's rows, read where they lie;
        # the one out of it, [1,12,7,7]: its channels (the input's innermost axis) would cut
        # in whole vectors, 8 and 4 on AVX2, not at all on AVX-512 (12 < 2 x 16), so it cuts
        # the next axis, its 7 rows, into 6 bands (two threads: 3 and 4 rows)
        trans = [s for s in code.plan.steps() if s.op == "Transpose"]
        assert all(t.attrs["band"][0] == 1 for t in trans[0].parts) and trans[0].parts
        bands = [(2, 0, 1), (2, 1, 2), (2, 2, 3), (2, 3, 4), (2, 4, 5), (2, 5, 7)]
        assert [t.attrs["band"] for t in trans[1].parts] == bands


def _step(op: str, x: tuple, w: tuple, y: tuple, attrs: dict, extra=()) -> Step:
    a = lambda nm, sh: Operand(nm, "arena", 0, sh, "float32")  # noqa: E731
    ins = (a("x", x), Operand("w", "packed", 0, w, "float32"), None, *extra)
    base = {"group": 1, "strides": [1, 1], "dilations": [1, 1], "pads": [1, 1, 1, 1]}
    return Step("c", op, "", ins, (a("y", y),), {**base, **attrs}, False)


def test_conv_tasks_cut_rows_where_channels_cannot():
    # NHWC, 80x80, 96 -> 24 channels, 3x3: 265 MFLOP, 8 bands of 10 rows
    nhwc = _step("Conv", (1, 80, 80, 96), (24, 96, 3, 3), (1, 80, 80, 24), {"layout": "NHWC"})
    tasks = split.conv_tasks(nhwc, 16)
    assert [t.attrs["rows"] for t in tasks] == [(10 * i, 10 * i + 10) for i in range(8)]
    # grouped (NCHW, 4 groups): bands too
    grouped = _step("Conv", (1, 64, 40, 40), (64, 16, 3, 3), (1, 64, 40, 40), {"group": 4})
    assert len(split.conv_tasks(grouped, 16)) == 8
    # two images: bands, each task the band of both
    two = _step("Conv", (2, 32, 40, 40), (32, 32, 3, 3), (2, 32, 40, 40), {})
    assert all("rows" in t.attrs for t in split.conv_tasks(two, 16))
    # a scalar scale in the epilogue runs in registers: 3 channel blocks cut into bands
    s = Operand("s", "weights", 0, (1,), "float32")
    prog = {"anchor_inputs": 3, "program": [{"op": "Mul", "args": [3, "acc"]}]}
    blk = _step("FusedConv", (1, 2, 80, 80, 16), (48, 32, 1, 1), (1, 3, 80, 80, 16),
                {"layout": "NCHW16c", "pads": [0, 0, 0, 0], **prog}, (s,))  # fmt: skip
    assert len(split.conv_tasks(blk, 16)) == 8
    # a residual read by an NHWC epilogue: bands too, its pass over each band's rows
    r = Operand("r", "arena", 0, (1, 80, 80, 24), "float32")
    res = _step("FusedConv", (1, 80, 80, 96), (24, 96, 3, 3), (1, 80, 80, 24),
                {"layout": "NHWC", "anchor_inputs": 3,
                 "program": [{"op": "Add", "args": ["acc", 3]}]}, (r,))  # fmt: skip
    assert [t.attrs["rows"] for t in split.conv_tasks(res, 16)] == [
        (10 * i, 10 * i + 10) for i in range(8)
    ]
    # a small depthwise conv counts what it moves: 20x20x192, 5x5 (3.8 MFLOP) splits
    dw = _step("Conv", (1, 12, 20, 20, 16), (192, 1, 5, 5), (1, 12, 20, 20, 16),
               {"layout": "NCHW16c", "group": 192, "pads": [2, 2, 2, 2]})  # fmt: skip
    assert len(split.conv_tasks(dw, 16)) >= 2


def test_elementwise_cuts_flat_into_an_even_number_of_lines():
    a = lambda nm, sh: Operand(nm, "arena", 0, sh, "float32")  # noqa: E731
    shape = (1, 3, 80, 80, 16)  # 3 channel blocks: a cut along them would be 2:1
    k = Operand("k", "weights", 0, (1,), "float32")
    st = Step("m", "Mul", "", (a("x", shape), k), (a("y", shape),), {}, False)
    tasks = split.elementwise_tasks(st)
    assert len(tasks) % 2 == 0 and len(tasks) >= 4
    sizes = [t.outputs[0].shape[0] for t in tasks]
    assert sum(sizes) == 3 * 80 * 80 * 16 and all(n % 16 == 0 for n in sizes)
    assert all(t.inputs[1].shape == (1,) for t in tasks)  # the scalar read whole
    offs = [t.outputs[0].offset for t in tasks]
    assert offs == [sum(sizes[:i]) * 4 for i in range(len(tasks))]
    # a per-channel operand: cut along the leading axis as before, in an even count
    c = Operand("c", "weights", 0, (1, 3, 1, 1, 16), "float32")
    st2 = Step("m", "Mul", "", (a("x", shape), c), (a("y", shape),), {}, False)
    blocks = [t.outputs[0].shape[1] for t in split.elementwise_tasks(st2)]
    assert blocks == [1, 2]
    assert [t.inputs[1].shape[1] for t in split.elementwise_tasks(st2)] == blocks


def _classifier() -> onnx.ModelProto:
    """LRN, then one-row GEMMs (GEMVs): a Gemm with transB and a bias, a MatMul whose
    epilogue adds another one-row product of another input (a row operand read at run
    time)."""
    nodes = [
        helper.make_node("LRN", ["x"], ["l"], size=5, alpha=1e-3, beta=0.75, bias=2.0),
        helper.make_node("Reshape", ["l", "flat"], ["f"]),
        helper.make_node("Gemm", ["f", "w0", "b0"], ["g"], transB=1),
        helper.make_node("Relu", ["g"], ["r"]),
        helper.make_node("MatMul", ["r", "w1"], ["h"]),
        helper.make_node("MatMul", ["f", "w2"], ["h2"]),
        helper.make_node("Add", ["h", "h2"], ["y"]),
    ]
    weights = [("flat", np.array([1, 800], np.int64)), ("w0", rnd(256, 800)), ("b0", rnd(256)),
               ("w1", rnd(256, 512)), ("w2", rnd(800, 512, seed=4))]  # fmt: skip
    return model(nodes, [("x", [1, 8, 10, 10])], ["y"], weights)


@pytest.mark.parametrize("isa", list(TARGETS))
def test_lrn_channels_beside_gemvs_are_bit_identical_for_any_thread_count(isa, monkeypatch):
    for code in split_on_threads(_classifier(), isa, monkeypatch):
        steps = code.plan.steps()
        (lrn,) = [s for s in steps if s.op == "LRN"]
        assert [t.attrs["channels"] for t in lrn.parts] == [(c, c + 1) for c in range(8)]
        gemms = [s for s in steps if "Gemm" in s.op or "MatMul" in s.op]
        assert len(gemms) == 3 and all(len(s.parts) >= 2 for s in gemms)


@pytest.mark.parametrize("isa", list(TARGETS))
def test_transpose_bands_by_tiles_are_bit_identical_for_any_thread_count(isa, monkeypatch):
    """NCHW -> NHWC of 32 channels at 16x16: each band of output rows is moved by
    vector-width tiles (emit_tensor._transpose_tiles), as the whole transpose is."""
    from guard.compiler.codegen.emit_tensor import tiled_transpose_dims

    m = model([helper.make_node("Transpose", ["x"], ["y"], perm=[0, 2, 3, 1])],
              [("x", [1, 32, 16, 16])], ["y"])  # fmt: skip
    for code in split_on_threads(m, isa, monkeypatch):
        (t,) = code.plan.steps()
        bands = [p.attrs["band"] for p in t.parts]
        assert bands[0][:2] == (1, 0) and bands[-1][2] == 16 and len(bands) % 2 == 0
        assert all(a[2] == b[1] for a, b in zip(bands, bands[1:], strict=False))
        in_st = [8192, 16, 1, 256]  # x's element strides in the output's dim order
        width = table_for(isa).vector_width
        for _, d0, d1 in bands:
            assert tiled_transpose_dims((1, d1 - d0, 16, 32), in_st, width) is not None


def test_conv_tasks_take_the_count_that_shares_evenly_between_two_threads():
    # the pool deals each thread its half of the tasks first: 12 rows in 8 bands of 1 and 2
    # give each 6; 3 rows in 2 bands or 12 channels in vectors of 8 give one thread 2/3
    assert [split_cuts.balance(*a) for a in ((12, 8), (3, 2), (12, 2, 8), (5, 4))] == [
        1.0, 1.33, 1.33, 1.2]  # fmt: skip
    blk = {"layout": "NCHW16c", "pads": [0, 0, 0, 0]}
    # PP-OCRv4's recogniser: 480 channels (30 blocks) at 3 x 80. Rows would cut 1 and 2
    # (the layer ran 1.5x on two threads): 8 runs of 3 or 4 blocks, 15 blocks a thread
    late = _step("Conv", (1, 30, 3, 80, 16), (480, 480, 1, 1), (1, 30, 3, 80, 16), blk)
    assert [t.outputs[0].shape[1] for t in split.conv_tasks(late, 16)] == [3, 4, 4, 4] * 2
    # 240 channels (15 blocks, 7 and 8 a thread) at 12 x 80: 8 bands of 1 and 2 rows
    mid = _step("Conv", (1, 15, 12, 80, 16), (240, 240, 1, 1), (1, 15, 12, 80, 16), blk)
    assert [t.attrs["rows"] for t in split.conv_tasks(mid, 16)] == [
        (12 * i // 8, 12 * (i + 1) // 8) for i in range(8)
    ]


def _uneven() -> onnx.ModelProto:
    """1x1 convolutions whose channels and rows split unevenly into 8: 240 channels at
    12 x 10 and 480 at 3 x 10 (the recogniser's late layers)."""
    nodes = [
        helper.make_node("Conv", ["x", "w0"], ["y0"]),
        helper.make_node("Conv", ["x2", "w1"], ["c"]),
        helper.make_node("Relu", ["c"], ["y1"]),
    ]
    return model(nodes, [("x", [1, 240, 12, 10]), ("x2", [1, 480, 3, 10])], ["y0", "y1"],
                 [("w0", rnd(240, 240, 1, 1)), ("w1", rnd(480, 480, 1, 1))])  # fmt: skip


@pytest.mark.parametrize("isa", list(TARGETS))
def test_even_shares_are_bit_identical_for_any_thread_count(isa, monkeypatch):
    for code in split_on_threads(_uneven(), isa, monkeypatch, ("y0", "y1")):
        convs = [s for s in code.plan.steps() if "Conv" in s.op]
        assert len(convs) == 2 and all(len(s.parts) == 8 for s in convs), [
            (s.outputs[0].shape, [t.attrs.get("rows") for t in s.parts]) for s in convs
        ]


def test_transpose_tasks_cut_the_axis_that_shares_evenly():
    a = lambda nm, sh: Operand(nm, "arena", 0, sh, "float32")  # noqa: E731
    # ddddocr_det's NHWC -> NCHW of 48 channels at 104 x 104: its channels, the input's
    # innermost axis, would cut in vectors of 16 as 16 and 32 (1.2x on two threads), its
    # rows cut into 8 bands of 13
    st = Step("t", "Transpose", "", (a("x", (1, 104, 104, 48)),), (a("y", (1, 48, 104, 104)),),
              {"perm": [0, 3, 1, 2]}, False)  # fmt: skip
    bands = [t.attrs["band"] for t in split.transpose_tasks(st, 16)]
    assert bands == [(2, 13 * i, 13 * i + 13) for i in range(8)]
    # 64 channels: 4 whole vectors, the leading axis as before
    st64 = Step("t", "Transpose", "", (a("x", (1, 104, 104, 64)),), (a("y", (1, 64, 104, 104)),),
                {"perm": [0, 3, 1, 2]}, False)  # fmt: skip
    assert [t.attrs["band"] for t in split.transpose_tasks(st64, 16)] == [
        (1, 16 * i, 16 * i + 16) for i in range(4)]  # fmt: skip


def _grouped_residual(c: int, g: int) -> onnx.ModelProto:
    """ShuffleNet's unit without its shuffle: a 3x3 conv, two grouped 1x1 convs (a ReLU
    between), the second's epilogue adding the 3x3's output back (a residual read as a
    tensor), a ReLU after it."""
    nodes = [
        helper.make_node("Conv", ["x", "w0"], ["a"], pads=[1, 1, 1, 1]),
        helper.make_node("Conv", ["a", "w1"], ["b"], group=g),
        helper.make_node("Relu", ["b"], ["r"]),
        helper.make_node("Conv", ["r", "w2"], ["d"], group=g),
        helper.make_node("Add", ["d", "a"], ["s"]),
        helper.make_node("Relu", ["s"], ["y"]),
    ]
    weights = [("w0", rnd(c, 5, 3, 3)), ("w1", rnd(c, c // g, 1, 1)), ("w2", rnd(c, c // g, 1, 1))]
    return model(nodes, [("x", [1, 5, 10, 10])], ["y"], weights)


@pytest.mark.parametrize("isa", list(TARGETS))
@pytest.mark.parametrize("c", [12, 64])  # an NHWC region; channel blocks (NCHW<b>c)
def test_a_grouped_conv_reading_a_residual_splits_into_bands(isa, c, monkeypatch):
    """Grouped, so no runs of output channels: the conv cuts its output rows into bands and
    its epilogue's pass over the residual covers each band's rows only."""
    for code in split_on_threads(_grouped_residual(c, 4), isa, monkeypatch):
        (fused,) = [
            s
            for s in code.plan.steps()
            if s.op == "FusedConv"
            and s.attrs["group"] > 1
            and tensor_reads(s.attrs["program"], s.inputs)
        ]
        assert len(fused.parts) >= 2 and all("rows" in t.attrs for t in fused.parts)
