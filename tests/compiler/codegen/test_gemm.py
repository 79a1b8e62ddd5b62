"""Generated GEMM kernels against numpy (float64) on seeded inputs.

Every case is emitted into one module and JIT-compiled once (O3, host CPU), so the whole
sweep costs one LLVM compile. The cases hit each tail (M, N, K not multiples of the tile,
1), each chunk kind (K > kc: first, middle and last k-chunks), every schedule knob value,
both operand layouts, unpacked B (streamed and gathered), batches, BLAS dispatch, the
three vector widths and an epilogue.
"""

from __future__ import annotations

import zlib

import numpy as np
import pytest
from llvmlite import ir

from guard.compiler.codegen.gemm.driver import (
    GemmKernel,
    GemmSchedule,
    default_gemm_schedule,
    register_blas_symbol,
)

from ._jit import Jitted, f32


def relu_plus_one(builder: ir.IRBuilder, v: ir.Value) -> ir.Value:
    zero = ir.Constant(v.type, 0.0)
    r = builder.select(builder.fcmp_ordered(">", v, zero), v, zero)
    return builder.fadd(r, ir.Constant(v.type, 1.0))


S = GemmSchedule
CASES: dict[str, dict] = {
    "tiny": dict(M=1, N=1, K=1),
    "odd": dict(M=5, N=7, K=3),
    "tails": dict(M=37, N=45, K=300),
    "gemv": dict(M=1, N=515, K=129),
    "gemv_col": dict(M=1, N=3, K=1000),
    "transformer": dict(M=128, N=768, K=96, bias="row"),
    "bias_col": dict(M=23, N=40, K=17, bias="col"),
    "bias_full_kchunks": dict(
        M=23, N=40, K=70, bias="full", epilogue=True, schedule=S(mr=4, nr=32, kc=32, mc=8, nc=32)
    ),
    "residual_kchunks": dict(
        M=23,
        N=40,
        K=70,
        bias="row",
        residual=True,
        epilogue=True,
        schedule=S(mr=4, nr=32, kc=32, mc=8, nc=32),
    ),
    "residual_in_place_kchunks": dict(
        M=23,
        N=40,
        K=70,
        bias="row",
        residual=True,
        in_place=True,
        epilogue=True,
        schedule=S(mr=4, nr=32, kc=32, mc=8, nc=32),
    ),
    "blas_residual_in_place": dict(
        M=20,
        N=37,
        K=33,
        bias="col",
        residual=True,
        in_place=True,
        schedule=S(mr=6, nr=32, kc=64, mc=12, nc=32, use_blas=True),
    ),
    "residual_batch_stream": dict(M=9, N=21, K=13, batch=2, residual=True, b_packed=False),
    "bias_full_batch": dict(M=5, N=20, K=9, bias="full", batch=2, stride_b=0),
    "trans_a": dict(M=19, N=33, K=41, trans_a=True),
    "trans_b": dict(M=19, N=33, K=41, trans_b=True, bias="row"),
    "trans_ab": dict(M=13, N=50, K=20, trans_a=True, trans_b=True),
    "epilogue": dict(M=30, N=70, K=90, bias="row", epilogue=True),
    "epilogue_kchunks": dict(
        M=30, N=70, K=90, bias="col", epilogue=True, schedule=S(mr=4, nr=32, kc=32, mc=8, nc=32)
    ),
    # every knob value at least once
    "kc_first_mid_last": dict(M=29, N=61, K=101, schedule=S(mr=6, nr=32, kc=24, mc=12, nc=32)),
    "kc_first_last": dict(M=9, N=20, K=40, schedule=S(mr=3, nr=16, kc=32, mc=6, nc=16)),
    "unroll1": dict(M=17, N=33, K=50, schedule=S(mr=5, nr=16, kc=64, mc=10, nc=48, unroll=1)),
    "unroll3_rem": dict(M=17, N=33, K=50, schedule=S(mr=5, nr=48, kc=64, mc=5, nc=48, unroll=3)),
    "order_mn": dict(
        M=40, N=100, K=64, schedule=S(mr=7, nr=32, kc=16, mc=14, nc=64, loop_order="mn")
    ),
    "order_nm": dict(
        M=40, N=100, K=64, schedule=S(mr=7, nr=32, kc=16, mc=14, nc=64, loop_order="nm")
    ),
    "mr1_wide": dict(M=3, N=130, K=20, schedule=S(mr=1, nr=128, kc=8, mc=1, nc=128)),
    "mr14": dict(M=30, N=32, K=10, schedule=S(mr=14, nr=32, kc=10, mc=28, nc=32)),
    "blas": dict(M=64, N=96, K=80, schedule=S(mr=6, nr=32, kc=64, mc=12, nc=32, use_blas=True)),
    "blas_bias_epi": dict(
        M=20,
        N=37,
        K=33,
        bias="row",
        epilogue=True,
        trans_a=True,
        schedule=S(mr=6, nr=32, kc=64, mc=12, nc=32, use_blas=True),
    ),
    "blas_batch": dict(
        M=7,
        N=20,
        K=9,
        batch=3,
        stride_b=0,
        bias="row",
        schedule=S(mr=6, nr=32, kc=64, mc=12, nc=32, use_blas=True),
    ),
    "blas_residual": dict(
        M=20,
        N=37,
        K=33,
        bias="row",
        residual=True,
        epilogue=True,
        schedule=S(mr=6, nr=32, kc=64, mc=12, nc=32, use_blas=True),
    ),
    "blas_full": dict(
        M=20, N=37, K=33, bias="full", schedule=S(mr=6, nr=32, kc=64, mc=12, nc=32, use_blas=True)
    ),
    "blas_col_tb": dict(
        M=20,
        N=37,
        K=33,
        bias="col",
        trans_b=True,
        b_packed=False,
        schedule=S(mr=6, nr=32, kc=64, mc=12, nc=32, use_blas=True),
    ),
    # B at run time: streamed rows, or gathered from [N, K]
    "stream_b": dict(
        M=21, N=45, K=70, b_packed=False, bias="row", schedule=S(mr=6, nr=32, kc=32, mc=12, nc=32)
    ),
    "repack_b": dict(
        M=21, N=45, K=70, b_packed=False, trans_b=True, schedule=S(mr=6, nr=32, kc=32, mc=12, nc=32)
    ),
    "repack_b_default": dict(M=128, N=128, K=64, b_packed=False, trans_b=True),
    # Issue 38: a 2 MiB L2 sizes kc=64 x nc=4096 (a 1 MiB repack buffer, over the limit);
    # the emitter repacks in smaller blocks instead of refusing.
    "repack_b_big_l2": dict(
        M=2,
        N=4100,
        K=70,
        b_packed=False,
        trans_b=True,
        schedule=S(mr=2, nr=32, kc=64, mc=2, nc=4096),
    ),
    # batches: a shared weight (stride_b 0) and per-batch operands
    "batch_shared_b": dict(M=9, N=20, K=12, batch=3, stride_b=0, bias="row"),
    "batch_strided": dict(M=8, N=17, K=16, batch=4, b_packed=False, trans_b=True),
    "batch_packed": dict(M=8, N=17, K=16, batch=2),
    "few_rows_whole_k": dict(M=24, N=300, K=700, bias="row", epilogue=True),  # kc = K, default
    # vector widths of AVX2 and NEON (legalised on the host)
    "w8": dict(M=15, N=27, K=33, vector_width=8, bias="row", epilogue=True),
    "w8_kc": dict(M=15, N=27, K=33, vector_width=8, schedule=S(mr=6, nr=16, kc=8, mc=6, nc=16)),
    "w4": dict(M=11, N=9, K=21, vector_width=4, bias="col"),
    "w4_stream": dict(M=11, N=9, K=21, vector_width=4, b_packed=False),
}

KERNEL_KEYS = (
    "M",
    "N",
    "K",
    "trans_a",
    "trans_b",
    "bias",
    "vector_width",
    "schedule",
    "batch",
    "stride_b",
    "residual",
)


def _kernel(case: dict) -> GemmKernel:
    return GemmKernel(**{k: v for k, v in case.items() if k in KERNEL_KEYS})


@pytest.fixture(scope="module")
def jitted() -> Jitted:
    register_blas_symbol()
    module = ir.Module("gemm_tests")
    for name, case in CASES.items():
        _kernel(case).emit(
            module,
            name,
            epilogue=relu_plus_one if case.get("epilogue") else None,
            b_packed=case.get("b_packed", True),
        )
    return Jitted(module)


def _reference(
    k: GemmKernel, a: np.ndarray, b: np.ndarray, bias: np.ndarray, epilogue: bool, res=None
) -> np.ndarray:
    a64, b64 = a.astype(np.float64), b.astype(np.float64)
    out = np.swapaxes(a64, -1, -2) if k.trans_a else a64
    out = out @ (np.swapaxes(b64, -1, -2) if k.trans_b else b64)
    if k.bias == "row":
        out = out + bias
    elif k.bias == "col":
        out = out + bias[:, None]
    elif k.bias == "full":
        out = out + bias
    if res is not None:
        out = out + res
    return np.maximum(out, 0) + 1 if epilogue else out


@pytest.mark.parametrize("name", list(CASES))
def test_gemm_matches_numpy(jitted: Jitted, name: str) -> None:
    case = CASES[name]
    k = _kernel(case)
    rng = np.random.default_rng(zlib.crc32(name.encode()))
    batch = k.batch
    a = f32(rng, batch, *((k.K, k.M) if k.trans_a else (k.M, k.K)))
    b_shape = (k.N, k.K) if k.trans_b else (k.K, k.N)
    b = f32(rng, 1 if k.stride_b == 0 else batch, *b_shape)
    bias = f32(rng, *{"row": (k.N,), "col": (k.M,), "full": (k.M, k.N)}.get(k.bias, (1,)))
    c = np.full((batch, k.M, k.N), np.nan, np.float32)
    b_arg = (
        (k.pack_b(b[0]) if b.shape[0] == 1 else k.pack_b(b)) if case.get("b_packed", True) else b
    )
    args = [a, b_arg, bias if k.bias != "none" else None, c]
    res = f32(rng, batch, k.M, k.N) if k.residual else None
    if res is not None and case.get("in_place"):  # C holds the residual and is overwritten
        c[...] = res
        args.append(c)
    elif res is not None:
        args.append(res)
    jitted.fn(name, len(args))(*args)
    ref = _reference(k, a, b, bias, bool(case.get("epilogue")), res)
    np.testing.assert_allclose(c, ref, rtol=1e-4, atol=1e-4 * np.sqrt(k.K))


def test_fma_and_masked_tails_in_optimised_ir(jitted: Jitted) -> None:
    text = jitted.ir
    assert "@llvm.fma.v16f32" in text
    assert "@llvm.fma.v8f32" in text and "@llvm.fma.v4f32" in text
    assert "@llvm.masked.store.v16f32" in text  # N tails stored under a mask
    assert (
        "@llvm.masked.gather.v16f32" in text
    )  # an [N,K] runtime B is gathered, not copied in scalars
    assert "scipy_cblas_sgemm64_" in text


def test_default_schedule_valid_for_many_shapes() -> None:
    rng = np.random.default_rng(1)
    for _ in range(300):
        m, n, k = (int(x) for x in rng.integers(1, 3000, 3))
        for w in (4, 8, 16):
            s = default_gemm_schedule(m, n, k, w)
            s.validate(w)
            assert s.mr * (s.nr // w) + s.nr // w + 1 <= (16 if w == 8 else 32)


@pytest.mark.parametrize("isa", ["avx2", "avx512"])
def test_default_schedule_follows_the_target_table(isa: str) -> None:
    """Register blocking and cache blocks from each class's table (no code runs)."""
    from ._jit import target_of

    table = target_of(isa).table
    W = table.vector_width
    s = default_gemm_schedule(512, 512, 512, W, table=table)
    assert (s.mr, s.nr) == ((8, 2 * W) if isa == "avx512" else (6, 2 * W))
    assert s.mr * (s.nr // W) + s.nr // W + 1 <= table.registers
    assert s.kc * s.nr * 4 <= table.l1d_bytes  # a B micro-panel stays in L1d
    assert s.kc * s.nc * 4 <= table.l2_bytes  # a kc x nc block of B in L2
    # at most FEW_ROW_TILES row tiles: the whole K in one chunk, where K x nr fits L2 / 4
    assert default_gemm_schedule(24, 8210, 1024, W, table=table).kc == 1024
    assert default_gemm_schedule(24, 300, 700, W, table=table).kc == 700
    assert default_gemm_schedule(24, 8210, 8192, W, table=table).kc * s.nr * 4 <= table.l1d_bytes
    small_l2 = type(table)(table.isa, W, table.registers, table.l1d_bytes, 256 * 1024)
    assert default_gemm_schedule(512, 4096, 512, W, table=small_l2).nc < (
        default_gemm_schedule(512, 4096, 512, W, table=table).nc
    )


@pytest.mark.parametrize("isa", ["avx2", "avx512"])
@pytest.mark.parametrize("bias", ["none", "row"])
def test_the_default_tile_keeps_its_accumulators_in_registers(isa: str, bias: str) -> None:
    """The default micro-tile of a large GEMM, compiled for the class as the build does
    (O3, the class's CPU), stores no vector register to the stack: a tile LLVM spills runs
    its k loop through memory (the 12 x 2 AVX-512 tile spilled 12 zmm registers)."""
    import subprocess
    import tempfile

    from guard.compiler.codegen.gemm.microkernel import micro_kernel
    from guard.compiler.codegen.module import compile_module

    from ._jit import target_of

    target = target_of(isa)
    W = target.table.vector_width
    s = default_gemm_schedule(512, 512, 512, W, table=target.table)
    module = ir.Module("tile")
    module.triple = target.triple
    micro_kernel(module, s.mr, s.nr // W, W, W, bias=bias, unroll=s.unroll).linkage = "external"
    with tempfile.NamedTemporaryFile(suffix=".o") as f:
        f.write(compile_module(module, target).object_code)
        f.flush()
        asm = subprocess.run(["objdump", "-d", f.name], capture_output=True, text=True).stdout
    reg = "zmm" if W == 16 else "ymm"
    assert f"guard.ukr.{s.mr}x" in asm and f"%{reg}" in asm
    spills = [ln for ln in asm.splitlines() if f"%{reg}" in ln and "(%rsp)" in ln]
    assert not spills, spills[:4]


def test_a_repack_block_over_the_buffer_shrinks_nc_then_kc() -> None:
    from guard.compiler.codegen.gemm.emit import REPACK_LIMIT_BYTES, fit_repack

    s = GemmSchedule(mr=12, nr=32, kc=64, mc=144, nc=4096)
    got = fit_repack(s, N=4096, K=9216)
    assert (got.kc, got.nc) == (64, 2048) and got.kc * got.nc * 4 <= REPACK_LIMIT_BYTES
    assert fit_repack(s, N=1000, K=9216) == s  # nc is clipped to N first: 1024 fits
    wide = GemmSchedule(mr=12, nr=32, kc=8192, mc=144, nc=64)
    got = fit_repack(wide, N=64, K=9216)
    assert got.nc == 32 and got.kc * got.nc * 4 <= REPACK_LIMIT_BYTES


def test_bad_schedule_and_shapes_are_refused() -> None:
    with pytest.raises(ValueError, match="multiple of the vector width"):
        GemmKernel(4, 4, 4, schedule=GemmSchedule(mr=2, nr=12, kc=4, mc=2, nc=12))
    with pytest.raises(ValueError, match="loop_order"):
        GemmKernel(4, 4, 4, schedule=GemmSchedule(mr=2, nr=16, kc=4, mc=2, nc=16, loop_order="km"))
    with pytest.raises(ValueError, match="positive"):
        GemmKernel(0, 4, 4)
    # A repack block over the stack buffer is another schedule, not an error (issue 38).
    big = GemmKernel(
        8, 4096, 1024, trans_b=True, schedule=GemmSchedule(mr=8, nr=32, kc=1024, mc=8, nc=4096)
    )
    big.emit(ir.Module(), "g", b_packed=False)
    with pytest.raises(ValueError, match="expected \\(4, 5\\)"):
        GemmKernel(3, 5, 4).pack_b(np.zeros((5, 4), np.float32))


def test_packed_layout_is_panel_major_and_zero_padded() -> None:
    k = GemmKernel(2, 20, 3, schedule=GemmSchedule(mr=2, nr=16, kc=3, mc=2, nc=16))
    b = np.arange(60, dtype=np.float32).reshape(3, 20)
    p = k.pack_b(b).reshape(2, 3, 16)
    np.testing.assert_array_equal(p[0], b[:, :16])
    np.testing.assert_array_equal(p[1, :, :4], b[:, 16:])
    assert not p[1, :, 4:].any()


def test_equal_epilogues_from_distinct_closures_share_micro_kernels() -> None:
    def make_relu():
        def relu(builder: ir.IRBuilder, v: ir.Value) -> ir.Value:
            zero = ir.Constant(v.type, 0.0)
            return builder.select(builder.fcmp_ordered(">", v, zero), v, zero)

        return relu

    module = ir.Module()
    for i in range(3):  # one closure per fused node, as a code generator makes them
        GemmKernel(24, 32, 16, bias="row").emit(module, f"g{i}", epilogue=make_relu())
    GemmKernel(24, 32, 16, bias="row").emit(module, "plus_one", epilogue=relu_plus_one)
    ukrs = [f.name for f in module.functions if f.name.startswith("guard.ukr")]
    assert len(ukrs) == 2, ukrs  # one for the three relus, one for relu+1


def test_emits_an_aarch64_neon_object() -> None:
    """The kernels are target-neutral IR: LLVM lowers the W=4 variants to NEON."""
    import llvmlite.binding as llvm

    from .test_conv import neon_conv_kernels

    llvm.initialize_all_targets()
    llvm.initialize_all_asmprinters()
    module = ir.Module()
    module.triple = "aarch64-unknown-linux-gnu"
    GemmKernel(9, 10, 11, bias="row", vector_width=4).emit(module, "g", epilogue=relu_plus_one)
    neon_conv_kernels(module)
    tm = llvm.Target.from_triple(module.triple).create_target_machine(
        cpu="generic", features="+neon", opt=3
    )
    mod = llvm.parse_assembly(str(module))
    mod.verify()
    pb = llvm.create_pass_builder(tm, llvm.create_pipeline_tuning_options(speed_level=3))
    pb.getModulePassManager().run(mod, pb)
    asm = tm.emit_assembly(mod)
    assert "fmla" in asm and ".4s" in asm  # vector FMAs on 4 x f32
    assert len(tm.emit_object(mod)) > 0


def _random_schedule(rng: np.random.Generator, width: int) -> GemmSchedule:
    nvec = int(rng.integers(1, 5))
    mr = int(rng.integers(1, max(2, (32 - nvec - 1) // nvec) + 1))
    return GemmSchedule(
        mr=mr,
        nr=nvec * width,
        kc=int(rng.integers(1, 300)),
        mc=mr * int(rng.integers(1, 5)),
        nc=nvec * width * int(rng.integers(1, 5)),
        unroll=int(rng.integers(1, 5)),
        loop_order=str(rng.choice(["nm", "mn"])),
    )


@pytest.mark.slow
def test_random_shapes_and_schedules_sweep() -> None:
    """60 random GEMMs (shape, layout, bias, batch, B packed or not, schedule) in one module."""
    rng = np.random.default_rng(2026)
    module = ir.Module("gemm_sweep")
    cases = []
    for i in range(60):
        width = int(rng.choice([4, 8, 16]))
        m, n, kk = (int(x) for x in rng.integers(1, 200, 3))
        kern = GemmKernel(
            m, n, kk,
            trans_a=bool(rng.integers(2)), trans_b=bool(rng.integers(2)),
            bias=str(rng.choice(["none", "row", "col", "full"])), vector_width=width,
            schedule=_random_schedule(rng, width) if rng.integers(2) else None,
            batch=int(rng.integers(1, 3)), residual=bool(rng.integers(2)),
        )  # fmt: skip
        packed = bool(rng.integers(2))
        epi = bool(rng.integers(2))
        kern.emit(module, f"s{i}", epilogue=relu_plus_one if epi else None, b_packed=packed)
        cases.append((kern, packed, epi, f"s{i}"))
    jit = Jitted(module)
    for kern, packed, epi, name in cases:
        batch = kern.batch
        a = f32(rng, batch, *((kern.K, kern.M) if kern.trans_a else (kern.M, kern.K)))
        b = f32(rng, batch, *((kern.N, kern.K) if kern.trans_b else (kern.K, kern.N)))
        bias = f32(
            rng,
            *{"row": (kern.N,), "col": (kern.M,), "full": (kern.M, kern.N)}.get(kern.bias, (1,)),
        )
        c = np.full((batch, kern.M, kern.N), np.nan, np.float32)
        args = [a, kern.pack_b(b) if packed else b, bias if kern.bias != "none" else None, c]
        res = f32(rng, batch, kern.M, kern.N) if kern.residual else None
        if res is not None:
            args.append(res)
        jit.fn(name, len(args))(*args)
        ref = _reference(kern, a, b, bias, epi, res)
        np.testing.assert_allclose(
            c, ref, rtol=1e-4, atol=1e-4 * np.sqrt(kern.K), err_msg=f"{name} {kern}"
        )
