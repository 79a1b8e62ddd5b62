"""The model path's convolution (emit_conv.py) against the numpy reference kernel.

Every case runs the emitter alone (``conv_function``) in each layout it serves (NCHW,
NHWC, NCHW<L>c when the channels allow), with the default schedule and with points of
the schedule space; the sweep tests run every point of the space on shapes that reach
each mode (dense, grouped with masked vectors, depthwise), tails and padded borders.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import pytest
from llvmlite import ir

from guard.compiler.codegen.base import Kernel
from guard.compiler.codegen.conv.emitter import Conv, conv_function
from guard.compiler.codegen.conv.schedule import (
    ConvSchedule,
    Geometry,
    conv_space,
    default_conv_schedule,
    row_cost,
    small_file_rate,
)
from guard.compiler.codegen.kernel_plan import Operand
from guard.compiler.ir import layout
from guard.compiler.reference import nn

from ._jit import TARGETS, Jitted, host_vector_width, skip_unless_runnable, target_of

HOST = "avx512" if host_vector_width() == 16 else "avx2"
WIDTH = {"avx2": 8, "avx512": 16}

# (N, C, H, W, K, R, S, stride, pads (t, l, b, r), dilation, group)
CASES = [
    (1, 3, 15, 13, 8, 3, 3, 1, (1, 1, 1, 1), 1, 1),  # odd channels, odd sizes
    (2, 5, 9, 11, 7, 3, 3, 2, (1, 1, 1, 1), 1, 1),  # batch 2, stride 2, K < L
    (1, 16, 10, 19, 32, 1, 1, 1, (0, 0, 0, 0), 1, 1),  # 1x1
    (1, 32, 14, 14, 32, 3, 3, 1, (1, 1, 1, 1), 1, 32),  # depthwise
    (1, 32, 9, 9, 32, 3, 3, 2, (1, 1, 1, 1), 1, 32),  # depthwise stride 2
    (1, 16, 12, 12, 48, 3, 3, 1, (2, 2, 2, 2), 2, 1),  # dilation 2
    (1, 32, 8, 8, 64, 3, 3, 1, (1, 1, 1, 1), 1, 2),  # groups, 32 output channels each
    (1, 12, 7, 7, 12, 3, 3, 1, (1, 1, 1, 1), 1, 4),  # 3 channels per group (masked)
    (1, 48, 6, 9, 24, 3, 3, 2, (1, 1, 1, 1), 1, 4),  # 12 in / 6 out per group, stride 2
    (1, 16, 7, 7, 16, 7, 7, 1, (3, 3, 3, 3), 1, 1),  # kernel as wide as the image
    (1, 3, 32, 32, 16, 7, 7, 2, (3, 3, 3, 3), 1, 1),  # resnet's stem
    (1, 16, 8, 8, 16, 3, 3, 1, (0, 1, 2, 0), 1, 1),  # asymmetric pads
    (1, 8, 5, 23, 40, 1, 3, 1, (0, 2, 0, 1), 1, 1),  # 1x3, K = 2.5 vectors of 16
    (1, 64, 7, 7, 96, 3, 3, 1, (1, 1, 1, 1), 1, 1),  # a late layer: row narrower than T
    (1, 24, 6, 6, 24, 5, 5, 2, (2, 2, 2, 2), 1, 24),  # depthwise 5x5 stride 2
]


def _attrs(case: Sequence, lay: str) -> dict:
    _, _, _, _, _, _, _, st, pads, dil, grp = case
    return {"layout": lay, "group": grp, "strides": [st, st], "dilations": [dil, dil],
            "pads": list(pads)}  # fmt: skip


def _layouts(case: Sequence, width: int) -> list[str]:
    c, k = case[1], case[4]
    out = ["NCHW", "NHWC"]
    if c % width == 0 and k % width == 0:
        out.append(f"NCHW{width}c")
    return out


def geometry(case: Sequence, lay: str, width: int) -> Geometry:
    """The geometry of a case for a vector width: schedules need no code, nor its CPU."""
    n, c, h, w, k, r, s = case[:7]
    xshape = layout.to_layout_shape((n, c, h, w), lay)
    return Geometry(_attrs(case, lay), xshape, (k, c // case[10], r, s), width)


class Built:
    """One module of conv functions (one per schedule) for one case and layout."""

    def __init__(
        self, case: Sequence, lay: str, schedules: Sequence[ConvSchedule], bias: bool = True,
        opt: int = 3, isa: str = HOST,
    ) -> None:  # fmt: skip
        n, c, h, w, k, r, s = case[:7]
        self.attrs = _attrs(case, lay)
        self.lay = lay
        self.width = W = WIDTH[isa]
        xshape = layout.to_layout_shape((n, c, h, w), lay)
        wshape = (k, c // case[10], r, s)
        self.geo = Geometry(self.attrs, xshape, wshape, W)
        yshape = layout.to_layout_shape((n, k, self.geo.OH, self.geo.OW), lay)
        op = lambda name, shape: Operand(name, "arena", 0, tuple(shape), "float32")  # noqa: E731
        ins = (op("x", xshape), op("w", wshape)) + ((op("b", (k,)),) if bias else ())
        self.kernel = Kernel("Conv", self.attrs, ins, (op("y", yshape),), W)
        self.bias = bias
        module = ir.Module(name="conv_test")
        for i, sched in enumerate(schedules):
            conv_function(module, f"conv{i}", self.kernel, sched)
        self.jit = Jitted(module, opt=opt, target=target_of(isa))
        self.yshape = yshape

    def check(self, i: int, rng: np.random.Generator) -> None:
        n, c, h, w, k, r, s = self.case_dims
        x = rng.standard_normal((n, c, h, w)).astype(np.float32)
        wt = (rng.standard_normal((k, c // self.attrs["group"], r, s)) * 0.3).astype(np.float32)
        b = rng.standard_normal(k).astype(np.float32) if self.bias else None
        (want,) = nn.conv([x, wt, b], self.attrs)
        packed = Conv().pack("Conv", self.attrs, 1, wt, [self.kernel.inputs[0].shape], self.width)
        y = np.full(self.yshape, np.nan, np.float32)
        self.jit.fn(f"conv{i}")(layout.to_layout(x, self.lay), packed, b, y)
        np.testing.assert_allclose(layout.to_nchw(y, self.lay), want, rtol=1e-4, atol=1e-4)

    @property
    def case_dims(self) -> tuple[int, ...]:
        g = self.geo
        return g.N, g.C, g.H, g.W, g.K, g.R, g.S


def _sample(space: list[ConvSchedule], n: int, seed: int) -> list[ConvSchedule]:
    rng = np.random.default_rng(seed)
    idx = rng.choice(len(space), size=min(n, len(space)), replace=False)
    return [space[int(i)] for i in sorted(idx)]


def _check_case(case: Sequence, samples: int, opt: int = 3, isa: str = HOST) -> None:
    for lay in _layouts(case, WIDTH[isa]):
        geo = geometry(case, lay, WIDTH[isa])
        space = conv_space(geo)
        scheds = [default_conv_schedule(geo), *_sample(space, samples, seed=len(lay))]
        built = Built(case, lay, scheds, opt=opt, isa=isa)
        rng = np.random.default_rng(0)
        for i in range(len(scheds)):
            built.check(i, rng)
        Built(case, lay, scheds[:1], bias=False, opt=opt, isa=isa).check(0, rng)


_IDS = lambda c: "x".join(map(str, c[:7])) + f"g{c[10]}"  # noqa: E731


@pytest.mark.parametrize("isa", list(TARGETS))
@pytest.mark.parametrize("case", CASES, ids=_IDS)
def test_conv_matches_the_reference_in_every_layout(case, isa):
    """The default schedule and one other point, in every layout, with and without bias,
    as each x86 class's code (a class this host lacks is skipped, with the reason)."""
    skip_unless_runnable(isa)
    _check_case(case, samples=1, isa=isa)


@pytest.mark.slow
@pytest.mark.parametrize("case", CASES, ids=_IDS)
def test_conv_sampled_schedules_match_the_reference(case):
    _check_case(case, samples=8, opt=1)


SWEEP = {
    "dense": (1, 24, 6, 9, 40, 3, 3, 1, (1, 2, 0, 1), 1, 1),
    "grouped": (1, 12, 5, 7, 12, 3, 3, 2, (1, 1, 1, 1), 1, 4),
    "depthwise": (1, 32, 6, 10, 32, 3, 3, 1, (1, 1, 1, 1), 1, 32),
}


@pytest.mark.slow
@pytest.mark.parametrize("name", list(SWEEP))
def test_every_schedule_point_matches_the_reference(name):
    case = SWEEP[name]
    lay = "NHWC" if name == "depthwise" else "NCHW"
    geo = geometry(case, lay, WIDTH[HOST])
    assert geo.mode == name
    space = conv_space(geo)
    built = Built(case, lay, space, opt=1)
    rng = np.random.default_rng(1)
    for i in range(len(space)):
        built.check(i, rng)


@pytest.mark.parametrize("isa", list(TARGETS))
def test_space_is_valid_distinct_and_holds_the_default(isa):
    W = WIDTH[isa]
    for case in CASES:
        for lay in _layouts(case, W):
            geo = geometry(case, lay, W)
            space = conv_space(geo)
            assert len(set(space)) == len(space)
            for s in space:
                s.validate(W)
            assert default_conv_schedule(geo) in space, (case, lay)


@pytest.mark.parametrize("isa", list(TARGETS))
def test_default_heuristic(isa):
    """The schedule each class's table gives (no code runs: any host checks both)."""
    table = target_of(isa).table
    W = table.vector_width
    assert W == WIDTH[isa] and table.registers == (32 if isa == "avx512" else 16)
    assert table.conv_wide_tile == (14 if isa == "avx512" else 7)
    wide = geometry((1, 64, 56, 56, 64, 3, 3, 1, (1, 1, 1, 1), 1, 1), "NCHW", W)
    late = geometry((1, 512, 7, 7, 512, 3, 3, 1, (1, 1, 1, 1), 1, 1), "NCHW", W)
    one = geometry((1, 256, 14, 14, 128, 1, 1, 1, (0, 0, 0, 0), 1, 1), "NCHW", W)
    late1 = geometry((1, 512, 7, 7, 256, 1, 1, 1, (0, 0, 0, 0), 1, 1), "NCHW", W)
    five = geometry((1, 32, 27, 27, 64, 5, 5, 1, (2, 2, 2, 2), 1, 1), "NCHW", W)
    stem = geometry((1, 3, 224, 224, 64, 7, 7, 2, (3, 3, 3, 3), 1, 1), "NCHW", W)
    single = geometry((1, 64, 56, 56, 8, 3, 3, 1, (1, 1, 1, 1), 1, 1), "NCHW", W)
    got = {
        name: (s.ow_block, s.oc_block)
        for name, geo in [("wide", wide), ("late", late), ("one", one), ("late1", late1),
                          ("five", five), ("stem", stem), ("single", single)]
        for s in [default_conv_schedule(geo, table)]
    }  # fmt: skip
    if isa == "avx512":
        # A wide row gets the wide tile; with 32 registers a 7-wide row cannot fill it:
        # the registers go to channel vectors, and all 7 columns fit beside 3 of them.
        assert got["wide"] == (14, 1) and got["one"] == (14, 1) and got["late"] == (7, 3)
        # the stem's 7 taps at stride 2: 8 columns hold a kernel row's 21 inputs
        assert got["stem"] == (8, 1) and got["five"] == (14, 1)
    else:
        # 16 registers: two output-channel vectors per broadcast on most rows; 5 columns
        # where a 3x3 kernel's shared taps would spill 6; 6 on a 1x1 row that 6 divides
        # better; 3 vectors on 7-column rows of many vectors; never more than 7 columns.
        assert got["wide"] == (5, 2) and got["one"] == (5, 2) and got["late1"] == (4, 3)
        assert got["five"] == (3, 3) and got["stem"] == (4, 2) and got["single"] == (7, 1)
        assert got["late"] == (7, 1)  # 7 x 1 and 4 x 2 model alike: the first stays
    for geo in (wide, late, one, late1, five, stem, single):
        s = default_conv_schedule(geo, table)
        s.validate(W)
        assert s.ow_block <= table.conv_wide_tile
        if isa == "avx512":
            assert s.oc_block * (s.ow_block + 1) + 1 <= table.registers - 4
    # depthwise vectors read different channels: no sharing, one vector per tile
    dw = geometry((1, 32, 7, 7, 32, 3, 3, 1, (1, 1, 1, 1), 1, 32), "NHWC", W)
    assert default_conv_schedule(dw, table).oc_block == 1


def tile_asm(case: Sequence, lay: str, cpu: str, sched: ConvSchedule | None = None) -> str:
    """objdump's text of ``case``'s kernel (the default tile unless ``sched``) compiled
    for ``cpu`` as the build does (O3)."""
    import subprocess
    import tempfile

    from guard.compiler.codegen.llvm_target import codegen_target
    from guard.compiler.codegen.module import compile_module
    from guard.compiler.ir.isa_table import using_table

    target = codegen_target(f"llvm -mtriple=x86_64-linux-gnu -mcpu={cpu}")
    W = target.table.vector_width
    with using_table(target.table):
        sched = sched or default_conv_schedule(geometry(case, lay, W), target.table)
        module = ir.Module("tile")
        module.triple = target.triple
        n, c, h, w, k, r, s = case[:7]
        xshape = layout.to_layout_shape((n, c, h, w), lay)
        wshape = (k, c // case[10], r, s)
        geo = Geometry(_attrs(case, lay), xshape, wshape, W)
        yshape = layout.to_layout_shape((n, k, geo.OH, geo.OW), lay)
        op = lambda nm, shape: Operand(nm, "arena", 0, tuple(shape), "float32")  # noqa: E731
        ins = (op("x", xshape), op("w", wshape), op("b", (k,)))
        kern = Kernel("Conv", _attrs(case, lay), ins, (op("y", yshape),), W)
        conv_function(module, "conv0", kern, sched)
        obj = compile_module(module, target).object_code
    with tempfile.NamedTemporaryFile(suffix=".o") as f:
        f.write(obj)
        f.flush()
        return subprocess.run(["objdump", "-d", f.name], capture_output=True, text=True).stdout


@pytest.mark.parametrize("cpu", ["skylake-avx512", "znver4"])
@pytest.mark.parametrize("name", ["stem", "five", "wide", "late"])
def test_the_default_avx512_tile_keeps_its_registers(cpu, name):
    """The default tile compiled for a 32-register CPU as the build does (O3) stores no
    zmm register to the stack: the 14 x 1 tile of the 7x7 stride-2 stem spilled a kernel
    row's broadcast inputs inside its loop (~150 stack accesses on both CPUs)."""
    case = {
        "stem": (1, 3, 224, 224, 64, 7, 7, 2, (3, 3, 3, 3), 1, 1),
        "five": (1, 32, 27, 27, 64, 5, 5, 1, (2, 2, 2, 2), 1, 1),
        "wide": (1, 64, 56, 56, 64, 3, 3, 1, (1, 1, 1, 1), 1, 1),
        "late": (1, 512, 7, 7, 512, 3, 3, 1, (1, 1, 1, 1), 1, 1),
    }[name]
    asm = tile_asm(case, "NCHW" if case[1] % 16 else "NCHW16c", cpu)
    assert "vfmadd" in asm and "%zmm" in asm
    spills = [ln for ln in asm.splitlines() if "%zmm" in ln and "(%rsp)" in ln]
    assert not spills, spills[:4]


def test_the_16_register_model_charges_tails_latency_and_spills():
    """row_cost: a tile of fewer than CHAINS accumulators costs CHAINS FMA slots (one
    vector of 7 columns: 9/7 of peak), a tail tile costs the same floor, a remainder
    block of vectors likewise, and a tile whose shared taps outgrow the file pays the
    spill rate."""
    W, regs = 8, 16
    one = geometry((1, 256, 14, 14, 128, 1, 1, 1, (0, 0, 0, 0), 1, 1), "NCHW8c", W)
    assert row_cost(one, ConvSchedule(7, 1), regs) == pytest.approx(9 / 7)
    # 14 columns = 5 + 5 + 4: (10 + 10 + 9) slots for 28 vector-columns
    assert row_cost(one, ConvSchedule(5, 2), regs) == pytest.approx(29 / 28)
    # 16 vectors in blocks of 3: five blocks and one of a single vector
    per3 = (3 * 12 + 9) / 0.9  # every register taken: 0.9 on a 1x1 convolution
    per1 = 4 * 9 / 0.9
    assert row_cost(one, ConvSchedule(4, 3), regs) == pytest.approx((5 * per3 + per1) / 224)
    three = geometry((1, 64, 14, 14, 32, 3, 3, 1, (1, 1, 1, 1), 1, 1), "NCHW8c", W)
    assert small_file_rate(three, ConvSchedule(5, 2), regs) == 1.0
    assert small_file_rate(three, ConvSchedule(6, 2), regs) == 0.65  # 15 + 7 shared > 20
    assert small_file_rate(one, ConvSchedule(6, 2), regs) == 1.0  # no taps to share
    s2 = geometry((1, 64, 28, 28, 32, 3, 3, 2, (1, 1, 1, 1), 1, 1), "NCHW8c", W)
    assert small_file_rate(s2, ConvSchedule(6, 2), regs) == 1.0  # one shared tap


@pytest.mark.parametrize("case", CASES)
@pytest.mark.parametrize("T", [1, 3, 5, 7, 14])
def test_column_tiles_cover_the_row_once(case, T):
    """The tiles the emitter and the cost model share cover every output column once,
    none wider than T, the interior tiles only where every tap is inside the input."""
    geo = geometry(case, "NCHW", 8)
    left, full, fixed = geo.column_tiles(T)
    cols = [c for c0, w in fixed for c in range(c0, c0 + w)]
    cols += list(range(left, left + full))
    assert sorted(cols) == list(range(geo.OW))
    assert all(1 <= w <= T for _, w in fixed) and full % T == 0
    assert full == 0 or (geo.ow_lo <= left and left + full <= geo.ow_hi)


@pytest.mark.parametrize(
    "sched,why",
    [
        (ConvSchedule(ow_block=0), "must be positive"),
        (ConvSchedule(ow_block=14, oc_block=3), "spills"),
        (ConvSchedule(ow_block=4, unroll=9), "unroll"),
        (ConvSchedule(ow_block=4, loop_order="nm"), "loop_order"),
    ],
)
@pytest.mark.parametrize("width", [8, 16])
def test_bad_schedules_are_refused(sched, why, width):
    with pytest.raises(ValueError, match=why):
        sched.validate(width)


def neon_conv_kernels(module: ir.Module) -> None:
    """A dense and a depthwise convolution at width 4 (NEON), for the AArch64 object test."""
    for name, case, lay in (
        ("c", (1, 3, 6, 7, 5, 3, 3, 1, (1, 1, 1, 1), 1, 1), "NCHW"),
        ("dw", (1, 4, 6, 7, 4, 3, 3, 2, (1, 1, 1, 1), 1, 4), "NHWC"),
    ):
        n, c, h, w, k, r, s = case[:7]
        attrs = _attrs(case, lay)
        xshape = layout.to_layout_shape((n, c, h, w), lay)
        geo = Geometry(attrs, xshape, (k, c // case[10], r, s), 4)
        yshape = layout.to_layout_shape((n, k, geo.OH, geo.OW), lay)
        op = lambda nm, sh: Operand(nm, "arena", 0, tuple(sh), "float32")  # noqa: E731
        ins = (op("x", xshape), op("w", (k, c // case[10], r, s)), op("b", (k,)))
        kern = Kernel("Conv", attrs, ins, (op("y", yshape),), 4)
        conv_function(module, name, kern, default_conv_schedule(geo))
