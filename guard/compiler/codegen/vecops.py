"""Vector emission helpers for the GEMM kernels (llvmlite): types, FMA, masks, loops.

:func:`vector_type`, :func:`declare_fma` / :func:`fma` (llvmlite has no vector FMA
helper, so ``llvm.fma.v{W}f32`` is declared by hand), :func:`splat`, :func:`lane_mask`,
:func:`vload` / :func:`vstore`, :func:`masked_load` / :func:`masked_store`
(``llvm.masked.*``: tails are masked, never scalar loops), :func:`masked_gather`,
:func:`for_loop` / :func:`for_loop_carried` (counted loops with constant bounds; one trip
is emitted straight-line), :func:`for_loop_dynamic` (a run-time trip count), :func:`fptr`
(float pointer arithmetic). Every load/store passes its type explicitly, so the code
works with typed and opaque llvmlite pointers. Used by gemm.py, gemm_emit.py,
gemm_blas.py and microkernel.py.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

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

    def step_body(i: ir.Value, _vals: list[ir.Value]) -> list[ir.Value]:
        body(i)
        return []

    for_loop_carried(builder, start, stop, step, [], step_body)


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


def select_when(
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
