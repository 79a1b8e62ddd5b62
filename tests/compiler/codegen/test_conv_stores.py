"""The direct convolution's NCHW output tile and its streamed loop order (conv/direct.py,
conv/schedule.py) against the reference: a tile of an NCHW output is transposed in
registers and stored as runs of whole vectors (AVX-512, and stride 1 at any width), and
a 16-register pointwise convolution whose input outgrows L2 runs its rows outside its
channel blocks; both on the host and x86-64-v3, alone and in a model at 1 and 2 threads.
"""

from __future__ import annotations

import re

import numpy as np
import pytest
from onnx import helper

from guard.compiler.codegen.conv.schedule import ConvSchedule, conv_space, default_conv_schedule

from ._jit import TARGETS, skip_unless_runnable, target_of
from .test_conv import WIDTH, Built, geometry, tile_asm
from .test_emitters import model, rnd
from .test_threads_bands import split_on_threads

# (N, C, H, W, K, R, S, stride, pads, dilation, group): 3-channel first layers whose
# output rows are wider than a vector (tiles of 14 and of more than L columns, a K tail)
STEMS = [
    (1, 3, 11, 37, 24, 3, 3, 1, (1, 1, 1, 1), 1, 1),
    (1, 3, 13, 41, 20, 3, 3, 2, (1, 1, 1, 1), 1, 1),
    (1, 5, 9, 30, 40, 5, 5, 1, (2, 2, 2, 2), 1, 1),
    (1, 6, 8, 26, 12, 3, 3, 1, (1, 1, 1, 1), 1, 3),  # grouped: 4 channels a group
]


@pytest.mark.parametrize("isa", list(TARGETS))
@pytest.mark.parametrize("case", STEMS, ids=lambda c: "x".join(map(str, c[:8])))
def test_nchw_tiles_of_any_width_match_the_reference(case, isa):
    """The default tile, a tile of exactly L columns, wider than L, and narrow ones, with
    more than one vector, each with and without bias: equal to the reference."""
    skip_unless_runnable(isa)
    W = WIDTH[isa]
    geo = geometry(case, "NCHW", W)
    space = set(conv_space(geo))
    want = [ConvSchedule(W), ConvSchedule(W + 3), ConvSchedule(5, 2), ConvSchedule(3, 3)]
    scheds = [default_conv_schedule(geo)] + [s for s in want if s in space]
    assert len(scheds) >= 3
    rng = np.random.default_rng(3)
    built = Built(case, "NCHW", scheds, isa=isa)
    for i in range(len(scheds)):
        built.check(i, rng)
    Built(case, "NCHW", scheds[:1], bias=False, isa=isa).check(0, rng)


@pytest.mark.parametrize(
    "cpu,stride", [("skylake-avx512", 1), ("znver4", 1), ("znver4", 2), ("x86-64-v3", 1)]
)
def test_an_nchw_tile_stores_whole_vectors(cpu, stride):
    """vgg19's and PP-OCR's 3-channel stems: the output tile goes out transposed, as runs
    of vector stores. The lane-strided stores made LLVM assemble vectors lane by lane (100
    to 150 vinsertps on AVX-512, 56 on AVX2, 4-6 elements stored alone on AVX-512): the
    stem ran at 0.69 of sgemm on AVX-512, 0.52 on AVX2; now 10-15 and 0."""
    case = (1, 3, 224, 224, 64, 3, 3, stride, (1, 1, 1, 1), 1, 1)
    lines = tile_asm(case, "NCHW", cpu).splitlines()
    assert any("vfmadd" in ln for ln in lines)
    assert sum("vinsertps" in ln for ln in lines) < 20
    if cpu != "x86-64-v3":  # AVX-512's 14 columns: 8 + 4 + 2 lanes, no element alone
        alone = [ln for ln in lines if re.search(r"(vmovss|vextractps)\s+%xmm\d+,\S*\(", ln)]
        assert not alone, alone[:4]


@pytest.mark.parametrize("isa", list(TARGETS))
def test_a_pointwise_conv_past_l2_streams_its_rows_on_16_registers(isa):
    """x86-64-v3 (16 registers): a 1x1 convolution whose input is larger than L2 runs its
    output rows outside its channel blocks; a smaller input, a 3x3 kernel, or a
    32-register file keep the blocks outside (measured: schedule.py _streamed_order)."""
    table = target_of(isa).table
    W = table.vector_width
    big = geometry((1, 512, 28, 28, 128, 1, 1, 1, (0, 0, 0, 0), 1, 1), f"NCHW{W}c", W)
    small = geometry((1, 256, 14, 14, 1024, 1, 1, 1, (0, 0, 0, 0), 1, 1), f"NCHW{W}c", W)
    three = geometry((1, 128, 112, 112, 128, 3, 3, 1, (1, 1, 1, 1), 1, 1), f"NCHW{W}c", W)
    order = {
        name: default_conv_schedule(geo, table).loop_order
        for name, geo in (("big", big), ("small", small), ("three", three))
    }
    streamed = "oh_kv" if table.registers < 32 else "kv_oh"
    assert order == {"big": streamed, "small": "kv_oh", "three": "kv_oh"}


def _stem_net():
    """A 3-channel stem whose NCHW output is wider than a vector, a 1x1 convolution whose
    64 x 48 x 48 input (590 KB) outgrows AVX2's L2 (512 KB), and a grouped 1x1 whose
    groups hold 9 vectors of 8 lanes (blocks of 3 on AVX2)."""
    nodes = [
        helper.make_node("Conv", ["x", "w0", "b0"], ["a"], pads=[1, 1, 1, 1]),
        helper.make_node("Relu", ["a"], ["r"]),
        helper.make_node("Conv", ["r", "w1"], ["c"]),
        helper.make_node("Relu", ["c"], ["d"]),
        helper.make_node("Conv", ["d", "w2"], ["y"], group=2),
    ]
    weights = [("w0", rnd(64, 3, 3, 3)), ("b0", rnd(64)), ("w1", rnd(144, 64, 1, 1)),
               ("w2", rnd(144, 72, 1, 1))]  # fmt: skip
    return model(nodes, [("x", [1, 3, 48, 48])], ["y"], weights)


@pytest.mark.parametrize("isa", list(TARGETS))
def test_stem_and_streamed_pointwise_are_bit_identical_on_1_2_3_threads(isa, monkeypatch):
    for code in split_on_threads(_stem_net(), isa, monkeypatch):
        convs = [s for s in code.plan.steps() if "Conv" in s.op]
        assert len(convs) == 3 and all(s.parts for s in convs)


# Grouped convolutions whose groups hold a whole number of vectors but no block of 2 or 3
GROUPED = {
    "nine": (1, 272, 14, 14, 272, 1, 1, 1, (0, 0, 0, 0), 1, 4),  # 68 a group: 9 of 8 lanes
    "eight": (1, 384, 12, 12, 256, 3, 3, 1, (1, 1, 1, 1), 1, 2),  # 128 a group: 8 of 16
}


@pytest.mark.parametrize("isa", list(TARGETS))
def test_grouped_tiles_take_blocks_that_divide_the_group(isa):
    """A block of vectors that divides the group's vectors is tried past one that does
    not: shufflenet's 272->272 g4 gets 3 x 3 on 16 registers (7 x 1 before), alexnet's
    3x3 384->256 g2 4 x 4 on 32 (12 x 2 before, which spilled); alexnet's 5x5 g2 on 16
    registers keeps its 4 x 2 (2 vectors share, a wider block past 3 is not modelled)."""
    table = target_of(isa).table
    W = table.vector_width
    got = {
        name: default_conv_schedule(geometry(case, f"NCHW{W}c", W), table)
        for name, case in GROUPED.items()
    }
    five = geometry((1, 96, 26, 26, 256, 5, 5, 1, (2, 2, 2, 2), 1, 2), "NCHW", W)
    if isa == "avx2":
        assert (got["nine"].ow_block, got["nine"].oc_block) == (3, 3)
        d = default_conv_schedule(five, table)
        assert (d.ow_block, d.oc_block) == (4, 2)
    else:
        assert (got["eight"].ow_block, got["eight"].oc_block) == (4, 4)
    skip_unless_runnable(isa)  # the tiles against the reference
    for name, case in GROUPED.items():
        Built(case, f"NCHW{W}c", [got[name]], isa=isa).check(0, np.random.default_rng(5))


@pytest.mark.parametrize("cpu", ["skylake-avx512", "znver4"])
def test_the_grouped_avx512_tile_keeps_its_registers(cpu):
    """alexnet's 3x3 384->256 g2 at 12x12: its default tile stores no zmm register to the
    stack (12 x 2 stored and reloaded 47 in its kernel-row loop: 56.8 against 122.7 GFLOP/s
    for 4 x 4 on znver4)."""
    asm = tile_asm(GROUPED["eight"], "NCHW16c", cpu)
    assert "vfmadd" in asm
    spills = [ln for ln in asm.splitlines() if "%zmm" in ln and "(%rsp)" in ln]
    assert not spills, spills[:4]


def test_a_strided_one_vector_tile_on_16_registers_is_charged_its_spills():
    """x86-64-v3: at 3x3 stride 2 a 7 x 1 tile's kernel row reads 15 broadcast inputs
    beside its 7 accumulators and spills them in its loop; the row-cost model charges it,
    so 7-column rows of stride 2 get 4 x 2 (resnet50's 3x3/2 512->512 at 7x7); the AVX-512
    tile and the stride-1 row keep theirs."""
    late2 = (1, 512, 14, 14, 512, 3, 3, 2, (1, 1, 1, 1), 1, 1)
    late1 = (1, 512, 7, 7, 512, 3, 3, 1, (1, 1, 1, 1), 1, 1)
    got = {}
    for isa in ("avx2", "avx512"):
        table = target_of(isa).table
        W = table.vector_width
        for name, case in (("late2", late2), ("late1", late1)):
            s = default_conv_schedule(geometry(case, f"NCHW{W}c", W), table)
            got[isa, name] = (s.ow_block, s.oc_block)
    assert got["avx2", "late2"] == (4, 2) and got["avx2", "late1"] == (7, 1)
    assert got["avx512", "late2"] == (7, 3) and got["avx512", "late1"] == (7, 3)
    asm = tile_asm(late2, "NCHW8c", "x86-64-v3")
    spills = [ln for ln in asm.splitlines() if "%ymm" in ln and "(%rsp)" in ln]
    assert not spills, spills[:4]
    small = (1, 64, 13, 13, 64, 3, 3, 2, (1, 1, 1, 1), 1, 1)
    skip_unless_runnable("avx2")
    W = WIDTH["avx2"]
    geo = geometry(small, "NCHW8c", W)
    sched = default_conv_schedule(geo, target_of("avx2").table)
    assert (sched.ow_block, sched.oc_block) == (4, 2)
    Built(small, "NCHW8c", [sched], isa="avx2").check(0, np.random.default_rng(7))
