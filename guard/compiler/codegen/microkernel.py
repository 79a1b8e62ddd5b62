"""Vector emission helpers and the shared register-tiled FMA micro-kernel (llvmlite).

Used by the GEMM (gemm.py) and convolution (conv.py) emitters; other emitters may use the
helpers too: :func:`vector_type`, :func:`declare_fma` / :func:`fma` (llvmlite has no vector
FMA helper, so ``llvm.fma.v{W}f32`` is declared by hand), :func:`splat`, :func:`lane_mask`,
:func:`vload` / :func:`vstore`, :func:`masked_load` / :func:`masked_store`
(``llvm.masked.*``: tails are masked, never scalar loops), :func:`masked_gather`,
:func:`for_loop` / :func:`for_loop_carried` (counted loops with constant bounds; one trip
is emitted straight-line), :func:`fptr` (float pointer arithmetic). Every load/store
passes its type explicitly, so the code works with typed and opaque llvmlite pointers.

:func:`micro_kernel` is the one hot loop: ``C[rows, nvec*W] (+)= A-panel @ B-panel`` over a
run-time k count, with the accumulators in registers. Its compile-time parameters are only
the tile (rows, vectors, whether the last vector is masked), the bias kind, the epilogue,
the unroll and whether a residual is added; strides, k count, chunk kind and the tail's
lane count are arguments, so one module shares each variant across every GEMM and
convolution that uses it: compile time grows with the number of distinct tiles, not with
the number of layers (resnet50's 53 convolutions: 28 variants). Loops over tiles and
packing passes live in functions marked ``optsize`` and call it (noinline).
"""

from __future__ import annotations

from collections.abc import Callable, Hashable, Sequence

from llvmlite import ir

F32 = ir.FloatType()
I1 = ir.IntType(1)
I32 = ir.IntType(32)
I64 = ir.IntType(64)
F32P = ir.PointerType(F32)

Epilogue = Callable[[ir.IRBuilder, ir.Value], ir.Value]


def vector_type(width: int) -> ir.VectorType:
    return ir.VectorType(F32, width)


def intrinsic(module: ir.Module, name: str, ret: ir.Type, args: Sequence[ir.Type]) -> ir.Function:
    if name in module.globals:
        return module.globals[name]
    return ir.Function(module, ir.FunctionType(ret, list(args)), name)


def declare_fma(module: ir.Module, width: int) -> ir.Function:
    """``llvm.fma.v{W}f32``, declared once per module (llvmlite has no vector FMA helper)."""
    v = vector_type(width)
    return intrinsic(module, f"llvm.fma.v{width}f32", v, [v, v, v])


def fma(builder: ir.IRBuilder, a: ir.Value, b: ir.Value, c: ir.Value) -> ir.Value:
    """``a * b + c`` with one rounding, as the vector FMA intrinsic."""
    width = a.type.count
    return builder.call(declare_fma(builder.module, width), [a, b, c])


def splat(builder: ir.IRBuilder, scalar: ir.Value, width: int) -> ir.Value:
    v = vector_type(width)
    one = builder.insert_element(ir.Constant(v, ir.Undefined), scalar, ir.Constant(I32, 0))
    return builder.shuffle_vector(
        one, ir.Constant(v, ir.Undefined), ir.Constant(ir.VectorType(I32, width), [0] * width)
    )


def lane_mask(width: int, n_valid: int) -> ir.Constant:
    """Constant ``<W x i1>`` with the first ``n_valid`` lanes on."""
    return ir.Constant(ir.VectorType(I1, width), [1 if i < n_valid else 0 for i in range(width)])


def fptr(
    builder: ir.IRBuilder, base: ir.Value, offset: ir.Value | int, inbounds: bool = True
) -> ir.Value:
    """``base + offset`` floats (offset an i64 value or a Python int). Pass
    ``inbounds=False`` for an address that may lie outside the buffer (a masked access
    at a padded border): an inbounds GEP there would be poison."""
    if isinstance(offset, int):
        if offset == 0:
            return base
        offset = ir.Constant(I64, offset)
    return builder.gep(base, [offset], inbounds=inbounds, source_etype=F32)


def vload(builder: ir.IRBuilder, ptr: ir.Value, width: int) -> ir.Value:
    v = vector_type(width)
    return builder.load(builder.bitcast(ptr, ir.PointerType(v)), align=4, typ=v)


def vstore(builder: ir.IRBuilder, value: ir.Value, ptr: ir.Value) -> None:
    builder.store(value, builder.bitcast(ptr, ir.PointerType(value.type)), align=4)


def masked_load(builder: ir.IRBuilder, ptr: ir.Value, width: int, mask: ir.Value) -> ir.Value:
    """Load the lanes that ``mask`` selects; the others read as 0.0 and touch no memory."""
    v = vector_type(width)
    mt = ir.VectorType(I1, width)
    fn = intrinsic(
        builder.module, f"llvm.masked.load.v{width}f32.p0", v, [ir.PointerType(v), I32, mt, v]
    )
    return builder.call(
        fn,
        [builder.bitcast(ptr, ir.PointerType(v)), ir.Constant(I32, 4), mask, ir.Constant(v, 0.0)],
    )


def masked_store(builder: ir.IRBuilder, value: ir.Value, ptr: ir.Value, mask: ir.Value) -> None:
    width = value.type.count
    v = vector_type(width)
    mt = ir.VectorType(I1, width)
    fn = intrinsic(
        builder.module,
        f"llvm.masked.store.v{width}f32.p0",
        ir.VoidType(),
        [v, ir.PointerType(v), I32, mt],
    )
    builder.call(fn, [value, builder.bitcast(ptr, ir.PointerType(v)), ir.Constant(I32, 4), mask])


def masked_gather(
    builder: ir.IRBuilder, base: ir.Value, index: ir.Value, mask: ir.Value
) -> ir.Value:
    """``base[index[i]]`` for the lanes ``mask`` selects (0.0 elsewhere); ``index`` is a
    ``<W x i32>`` or ``<W x i64>`` vector (masked-off lanes may hold any index)."""
    width = index.type.count
    if index.type.element.width != 64:
        index = builder.sext(index, ir.VectorType(I64, width))
    v = vector_type(width)
    pv = ir.VectorType(F32P, width)
    addr = builder.add(
        splat_int(builder, builder.ptrtoint(base, I64), width),
        builder.mul(index, ir.Constant(index.type, [4] * width)),
    )
    ptrs = builder.inttoptr(addr, pv)
    fn = intrinsic(
        builder.module,
        f"llvm.masked.gather.v{width}f32.v{width}p0",
        v,
        [pv, I32, ir.VectorType(I1, width), v],
    )
    return builder.call(fn, [ptrs, ir.Constant(I32, 4), mask, ir.Constant(v, 0.0)])


def splat_int(builder: ir.IRBuilder, scalar: ir.Value, width: int) -> ir.Value:
    vt = ir.VectorType(scalar.type, width)
    one = builder.insert_element(ir.Constant(vt, ir.Undefined), scalar, ir.Constant(I32, 0))
    return builder.shuffle_vector(
        one, ir.Constant(vt, ir.Undefined), ir.Constant(ir.VectorType(I32, width), [0] * width)
    )


def for_loop(
    builder: ir.IRBuilder, start: int, stop: int, step: int, body: Callable[[ir.Value], None]
) -> None:
    """Emit ``for i in range(start, stop, step): body(i)`` (i an i64 value); one trip is inlined."""
    for_loop_carried(builder, start, stop, step, [], lambda i, _vals: (body(i), [])[1])


def for_loop_carried(
    builder: ir.IRBuilder,
    start: int,
    stop: int,
    step: int,
    init: Sequence[ir.Value],
    body: Callable[[ir.Value, list[ir.Value]], list[ir.Value]],
) -> list[ir.Value]:
    """A counted loop whose ``init`` values are carried through phis (accumulators)."""
    trips = max(0, -(-(stop - start) // step))
    if trips == 0:
        return list(init)
    if trips == 1:
        return list(body(ir.Constant(I64, start), list(init)))
    fn = builder.function
    pre = builder.block
    head = fn.append_basic_block("loop")
    builder.branch(head)
    builder.position_at_end(head)
    idx = builder.phi(I64, "i")
    idx.add_incoming(ir.Constant(I64, start), pre)
    phis = []
    for v in init:
        p = builder.phi(v.type)
        p.add_incoming(v, pre)
        phis.append(p)
    out = list(body(idx, list(phis)))
    nxt = builder.add(idx, ir.Constant(I64, step))
    latch = builder.block
    idx.add_incoming(nxt, latch)
    for p, v in zip(phis, out, strict=True):
        p.add_incoming(v, latch)
    done = fn.append_basic_block("loop.end")
    builder.cbranch(builder.icmp_signed("<", nxt, ir.Constant(I64, stop)), head, done)
    builder.position_at_end(done)
    return out


def tiles(
    builder: ir.IRBuilder, total: int, tile: int, body: Callable[[ir.Value, int], None]
) -> None:
    """Cover ``range(total)`` with tiles: a loop over full tiles, then the peeled short tail."""
    full = total // tile
    if full:
        for_loop(builder, 0, full * tile, tile, lambda i: body(i, tile))
    if total % tile:
        body(ir.Constant(I64, full * tile), total % tile)


def imul(builder: ir.IRBuilder, v: ir.Value, k: int) -> ir.Value:
    if isinstance(v, ir.Constant):
        return ir.Constant(I64, v.constant * k)
    return builder.mul(v, ir.Constant(I64, k))


def iadd(builder: ir.IRBuilder, *vs: ir.Value) -> ir.Value:
    out = vs[0]
    for v in vs[1:]:
        if isinstance(out, ir.Constant) and isinstance(v, ir.Constant):
            out = ir.Constant(I64, out.constant + v.constant)
        else:
            out = builder.add(out, v)
    return out


def for_loop_dynamic(
    builder: ir.IRBuilder,
    count: ir.Value,
    init: Sequence[ir.Value],
    body: Callable[[ir.Value, list[ir.Value]], list[ir.Value]],
) -> list[ir.Value]:
    """``for i in range(count)`` with ``count`` an i64 known only at run time (may be 0)."""
    fn = builder.function
    pre = builder.block
    head = fn.append_basic_block("dloop")
    loop = fn.append_basic_block("dloop.body")
    done = fn.append_basic_block("dloop.end")
    builder.branch(head)
    builder.position_at_end(head)
    idx = builder.phi(I64, "i")
    idx.add_incoming(ir.Constant(I64, 0), pre)
    phis = []
    for v in init:
        p = builder.phi(v.type)
        p.add_incoming(v, pre)
        phis.append(p)
    builder.cbranch(builder.icmp_signed("<", idx, count), loop, done)
    builder.position_at_end(loop)
    out = list(body(idx, list(phis)))
    latch = builder.block
    idx.add_incoming(builder.add(idx, ir.Constant(I64, 1)), latch)
    for p, v in zip(phis, out, strict=True):
        p.add_incoming(v, latch)
    builder.branch(head)
    builder.position_at_end(done)
    return list(phis)


def _when(
    builder: ir.IRBuilder, cond: ir.Value, vals: list[ir.Value], then: Callable[[], list[ir.Value]]
) -> list[ir.Value]:
    """``vals = then() if cond else vals`` (phis at the join)."""
    fn = builder.function
    pre = builder.block
    yes = fn.append_basic_block("when")
    join = fn.append_basic_block("when.end")
    builder.cbranch(cond, yes, join)
    builder.position_at_end(yes)
    new = then()
    yes_end = builder.block
    builder.branch(join)
    builder.position_at_end(join)
    out = []
    for old, nv in zip(vals, new, strict=True):
        p = builder.phi(old.type)
        p.add_incoming(old, pre)
        p.add_incoming(nv, yes_end)
        out.append(p)
    return out


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
        tail_mask = bld.icmp_unsigned("<", lanes, splat_int(bld, tail_lanes, W))
    vt = vector_type(W)
    a_rows = [fptr(bld, pa, bld.mul(lda_row, ir.Constant(I64, i))) for i in range(rows)]

    def step(kk: ir.Value, acc: list[ir.Value]) -> list[ir.Value]:
        brow = fptr(bld, pb, bld.mul(kk, ldb))
        bv = []
        for j in range(nvec):
            p = fptr(bld, brow, j * W)
            last_masked = mask_b and j == nvec - 1 and tail_mask is not None
            bv.append(masked_load(bld, p, W, tail_mask) if last_masked else vload(bld, p, W))
        koff = bld.mul(kk, lda_k)
        out = list(acc)
        for i in range(rows):
            av = splat(bld, bld.load(fptr(bld, a_rows[i], koff), typ=F32), W)
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

    c_rows = [fptr(bld, pc, bld.mul(ldc, ir.Constant(I64, i))) for i in range(rows)]

    def cptr(i: int, j: int) -> ir.Value:
        return fptr(bld, c_rows[i], j * W)

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
                    out.append(bld.fadd(acc[i * nvec + j], load_masked(fptr(bld, pres, off), j)))
            return out

        first = bld.icmp_unsigned(
            "==", bld.and_(flags, ir.Constant(I32, ACCUMULATE)), ir.Constant(I32, 0)
        )
        acc = _when(bld, first, acc, add_res)

    acc = _when(
        bld,
        bld.icmp_unsigned("!=", bld.and_(flags, ir.Constant(I32, ACCUMULATE)), ir.Constant(I32, 0)),
        acc,
        add_c,
    )

    def finish() -> list[ir.Value]:
        out = []
        bias_vecs = (
            [load_masked(fptr(bld, pbias, j * W), j) for j in range(nvec)] if bias == "row" else []
        )
        for i in range(rows):
            bcol = splat(bld, bld.load(fptr(bld, pbias, i), typ=F32), W) if bias == "col" else None
            for j in range(nvec):
                v = acc[i * nvec + j]
                if bias == "row":
                    v = bld.fadd(v, bias_vecs[j])
                elif bias == "full":  # a bias matrix laid out like C
                    v = bld.fadd(
                        v,
                        load_masked(
                            fptr(
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
        acc = _when(
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
    vt = vector_type(width)
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
        module._guard_micro_kernels = cache  # type: ignore[attr-defined]
    return cache
