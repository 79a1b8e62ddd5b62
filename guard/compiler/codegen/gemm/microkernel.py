"""The shared register-tiled FMA micro-kernel of the generated GEMMs (llvmlite).

:func:`micro_kernel` is the one hot loop: ``C[rows, nvec*W] (+)= A-panel @ B-panel`` over a
run-time k count, with the accumulators in registers. Its compile-time parameters are only
the tile (rows, vectors, whether the last vector is masked), the bias kind, the epilogue,
the unroll and whether a residual is added; strides, k count, chunk kind and the tail's
lane count are arguments, so one module shares each variant across every GEMM that uses
it: compile time grows with the number of distinct tiles, not with the number of
layers. Loops over tiles and packing passes live in functions marked ``optsize`` and
call it (noinline). IR helpers are in irutil.py.
"""

from __future__ import annotations

from collections.abc import Hashable

from llvmlite import ir

from guard.compiler.codegen.irutil import (
    F32,
    F32P,
    I32,
    I64,
    Epilogue,
    elem_ptr,
    fma,
    for_loop_dynamic,
    masked_load,
    masked_store,
    select_when,
    splat,
    vec,
    vload,
    vstore,
)

ACCUMULATE = 1  # flags bit: add the C already stored (k-chunks after the first)
FINISH = 2  # flags bit: add the bias and run the epilogue (the last k-chunk)

UKR_ARGS = ("a", "b", "c", "bias", "klen", "lda_row", "lda_k", "ldb", "ldc", "flags", "tail", "res")


def micro_kernel(
    module: ir.Module,
    rows: int,
    nvec: int,
    tail: int,
    width: int,
    bias: str = "none",
    epilogue: Epilogue | None = None,
    unroll: int = 4,
    mask_b: bool = False,
    epilogue_key: Hashable | None = None,
    residual: bool = False,
) -> ir.Function:
    """The ``rows x nvec*W`` FMA tile, declared once per module per variant.

    ``void ukr(const float* a, const float* b, float* c, const float* bias, i64 klen,
    i64 lda_row, i64 lda_k, i64 ldb, i64 ldc, i32 flags, i32 tail, const float* res)``:
    for k in range(klen),
    ``acc[i][j] += a[i*lda_row + k*lda_k] * b[k*ldb + j*W : +W]``; then, per
    ``flags``, ``acc += C`` (ACCUMULATE), ``+ bias`` and the epilogue (FINISH), and a store
    to ``c[i*ldc + j*W]`` with the last vector masked to ``tail`` lanes (a run-time
    argument, so one variant serves every tail width; ``tail == W`` at compile time
    gives the unmasked variant, which ignores the argument). ``bias`` "row" is
    a vector per column (``bias[j*W]``), "col" a scalar per row (``bias[i]``), "full" a
    matrix laid out like C (``bias[i*ldc + j*W]``). ``residual``: the first k-chunk (flags
    without ACCUMULATE) also adds ``res``, laid out like C (a fused ``Add`` of another
    tensor, so before the epilogue); ``res`` may be ``c`` itself; it is ignored otherwise.
    ``mask_b``
    masks the last B vector too (a B read in place whose row ends at ``tail``).
    Variants are shared by key; pass ``epilogue_key`` (hashable) to share the variants of
    equal epilogues built by different callables; without one, the epilogue's own IR
    (emitted once into a scratch module, see :func:`epilogue_fingerprint`) is the key.
    """
    ekey = None
    if epilogue is not None:
        ekey = epilogue_key if epilogue_key is not None else epilogue_fingerprint(epilogue, width)
    cache = _ukr_cache(module)
    has_tail = tail < width
    key = (rows, nvec, has_tail, width, bias, ekey, unroll, mask_b, residual)
    if key in cache:
        return cache[key][0]
    W = width
    name = f"guard.ukr.{rows}x{nvec}v{W}{'.tail' if has_tail else ''}.{bias}.u{unroll}{'.mb' if mask_b else ''}{'.res' if residual else ''}"
    if ekey is not None:
        name += f".e{len([k for k in cache if k[5] is not None])}"
    args = [F32P, F32P, F32P, F32P, I64, I64, I64, I64, I64, I32, I32, F32P]
    fn = ir.Function(module, ir.FunctionType(ir.VoidType(), args), name)
    # keep the epilogue callable alive with its key, so id() cannot be reused meanwhile
    cache[key] = (fn, epilogue)
    fn.linkage = "internal"
    # Not inlined: a call per micro-tile is noise next to klen*rows*nvec FMAs, while
    # inlining each variant at each call site multiplies what O3 compiles.
    fn.attributes.add("noinline")
    for arg, nm in zip(fn.args, UKR_ARGS, strict=True):
        arg.name = nm
    for i in range(4):
        if not (residual and i == 2):  # c may be res itself (an in-place residual Add)
            fn.args[i].add_attribute("noalias")
    bld = ir.IRBuilder(fn.append_basic_block("entry"))
    pa, pb, pc, pbias, klen, lda_row, lda_k, ldb, ldc, flags, tail_lanes, pres = fn.args
    tail_mask = None
    if has_tail:
        lanes = ir.Constant(ir.VectorType(I32, W), list(range(W)))
        tail_mask = bld.icmp_unsigned("<", lanes, splat(bld, tail_lanes, W))
    vt = vec(W)
    a_rows = [elem_ptr(bld, pa, bld.mul(lda_row, ir.Constant(I64, i))) for i in range(rows)]

    def step(kk: ir.Value, acc: list[ir.Value]) -> list[ir.Value]:
        brow = elem_ptr(bld, pb, bld.mul(kk, ldb))
        bv = []
        for j in range(nvec):
            p = elem_ptr(bld, brow, j * W)
            last_masked = mask_b and j == nvec - 1 and tail_mask is not None
            bv.append(masked_load(bld, p, W, tail_mask) if last_masked else vload(bld, p, W))
        koff = bld.mul(kk, lda_k)
        out = list(acc)
        for i in range(rows):
            av = splat(bld, bld.load(elem_ptr(bld, a_rows[i], koff), typ=F32), W)
            for j in range(nvec):
                out[i * nvec + j] = fma(bld, av, bv[j], out[i * nvec + j])
        return out

    u = max(1, unroll)
    acc = [ir.Constant(vt, 0.0)] * (rows * nvec)
    if u > 1:
        trips = bld.udiv(klen, ir.Constant(I64, u))

        def unrolled(t: ir.Value, acc: list[ir.Value]) -> list[ir.Value]:
            base = bld.mul(t, ir.Constant(I64, u))
            for s in range(u):
                acc = step(bld.add(base, ir.Constant(I64, s)), acc)
            return acc

        acc = for_loop_dynamic(bld, trips, acc, unrolled)
        done = bld.mul(trips, ir.Constant(I64, u))
        acc = for_loop_dynamic(
            bld, bld.sub(klen, done), acc, lambda t, a: step(bld.add(done, t), a)
        )
    else:
        acc = for_loop_dynamic(bld, klen, acc, step)

    c_rows = [elem_ptr(bld, pc, bld.mul(ldc, ir.Constant(I64, i))) for i in range(rows)]

    def cptr(i: int, j: int) -> ir.Value:
        return elem_ptr(bld, c_rows[i], j * W)

    def load_masked(p: ir.Value, j: int) -> ir.Value:
        return (
            masked_load(bld, p, W, tail_mask)
            if (j == nvec - 1 and tail_mask is not None)
            else vload(bld, p, W)
        )

    def add_c() -> list[ir.Value]:
        return [
            bld.fadd(acc[i * nvec + j], load_masked(cptr(i, j), j))
            for i in range(rows)
            for j in range(nvec)
        ]

    if residual:
        # Added by the first k-chunk (the one that does not accumulate), so C may be the
        # residual itself: each element is read before its first store.
        def add_res() -> list[ir.Value]:
            out = []
            for i in range(rows):
                for j in range(nvec):
                    off = bld.add(bld.mul(ldc, ir.Constant(I64, i)), ir.Constant(I64, j * W))
                    out.append(
                        bld.fadd(acc[i * nvec + j], load_masked(elem_ptr(bld, pres, off), j))
                    )
            return out

        first = bld.icmp_unsigned(
            "==", bld.and_(flags, ir.Constant(I32, ACCUMULATE)), ir.Constant(I32, 0)
        )
        acc = select_when(bld, first, acc, add_res)

    acc = select_when(
        bld,
        bld.icmp_unsigned("!=", bld.and_(flags, ir.Constant(I32, ACCUMULATE)), ir.Constant(I32, 0)),
        acc,
        add_c,
    )

    def finish() -> list[ir.Value]:
        out = []
        bias_vecs = (
            [load_masked(elem_ptr(bld, pbias, j * W), j) for j in range(nvec)]
            if bias == "row"
            else []
        )
        for i in range(rows):
            bcol = (
                splat(bld, bld.load(elem_ptr(bld, pbias, i), typ=F32), W) if bias == "col" else None
            )
            for j in range(nvec):
                v = acc[i * nvec + j]
                if bias == "row":
                    v = bld.fadd(v, bias_vecs[j])
                elif bias == "full":  # a bias matrix laid out like C
                    v = bld.fadd(
                        v,
                        load_masked(
                            elem_ptr(
                                bld,
                                pbias,
                                bld.add(bld.mul(ldc, ir.Constant(I64, i)), ir.Constant(I64, j * W)),
                            ),
                            j,
                        ),
                    )
                elif bcol is not None:
                    v = bld.fadd(v, bcol)
                if epilogue is not None:
                    v = epilogue(bld, v)
                out.append(v)
        return out

    if bias != "none" or epilogue is not None:
        acc = select_when(
            bld,
            bld.icmp_unsigned("!=", bld.and_(flags, ir.Constant(I32, FINISH)), ir.Constant(I32, 0)),
            acc,
            finish,
        )
    for i in range(rows):
        for j in range(nvec):
            p = cptr(i, j)
            if j == nvec - 1 and tail_mask is not None:
                masked_store(bld, acc[i * nvec + j], p, tail_mask)
            else:
                vstore(bld, acc[i * nvec + j], p)
    bld.ret_void()
    return fn


def epilogue_fingerprint(epilogue: Epilogue, width: int) -> Hashable:
    """The IR an epilogue emits for one ``<W x float>``, as text: equal chains built by
    distinct closures (one per fused node) get one key, so they share micro-kernels
    instead of multiplying compile time by the number of layers."""
    scratch = ir.Module("epilogue_fingerprint")
    vt = vec(width)
    fn = ir.Function(scratch, ir.FunctionType(vt, [vt]), "e")
    b = ir.IRBuilder(fn.append_basic_block("entry"))
    try:
        b.ret(epilogue(b, fn.args[0]))
    except Exception:  # an epilogue tied to its real module: fall back to its identity
        return ("id", id(epilogue))
    return ("ir", str(scratch))


def _ukr_cache(module: ir.Module) -> dict:
    cache = getattr(module, "_guard_micro_kernels", None)
    if cache is None:
        cache = {}
        module._guard_micro_kernels = cache
    return cache
