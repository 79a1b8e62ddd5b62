"""The one helper library over llvmlite.ir: types, index arithmetic, vectors, pointers,
loads and stores (masked tails included), intrinsics, counted loops and reductions.

Every emitter (elementwise, norm, pool, reduce, tensor, conv, and the GEMM kernels) builds
its IR with these. Values may be scalars (``float``) or vectors (``<W x float>``); the
helpers that make constants splat them to the value's type. Index arithmetic (``add``,
``mul``) folds Python ints and i64 constants, so a compile-time offset costs nothing.

Two families of access, one implementation each: index-level (``load``/``store``,
``load_lanes``/``store_lanes``: ``base[index]``, through :func:`elem_ptr`) and
pointer-level (``vload``/``vstore``, ``masked_load``/``masked_store``: the GEMM kernels
compute their pointers). Masked accesses (``llvm.masked.*``) are how tails are handled,
never scalar loops; a masked load never reads the lanes it leaves out.

Two loop shapes, because they answer two needs: :func:`loop`, a context manager whose
body is written inline (the elementwise emitters), and :func:`for_loop_carried`, a
callback that carries values through phis (the GEMM accumulators; one trip is emitted
straight-line); :func:`for_loop_dynamic` when the trip count is known only at run time.
Every load/store passes its type explicitly, so the code works with typed and opaque
llvmlite pointers.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager

import llvmlite.ir as ir

F32 = ir.FloatType()
I1 = ir.IntType(1)
I8 = ir.IntType(8)
I32 = ir.IntType(32)
I64 = ir.IntType(64)
PTR = ir.PointerType()
F32P = ir.PointerType(F32)
VOID = ir.VoidType()

Epilogue = Callable[[ir.IRBuilder, ir.Value], ir.Value]

# Float math that may be reassociated (reductions vectorise only with it). Elementwise
# code does not use it: its results stay bit-comparable with the reference up to the
# approximations documented in mathfn.py.
REDUCE_FLAGS = ("reassoc", "nsz", "contract")


# -- index arithmetic (i64) -------------------------------------------------------------------


def i64(v: int | ir.Value) -> ir.Value:
    return v if isinstance(v, ir.Value) else ir.Constant(I64, int(v))


def _folded(t: int | ir.Value) -> int | None:
    """A term's value when it is known at compile time (a Python int or an i64 constant)."""
    if isinstance(t, int):
        return t
    if isinstance(t, ir.Constant) and isinstance(t.constant, int):
        return int(t.constant)
    return None


def add(b: ir.IRBuilder, *terms: int | ir.Value) -> ir.Value:
    """Sum of i64 terms, the compile-time ones folded into one constant added last."""
    k = 0
    acc: ir.Value | None = None
    for t in terms:
        c = _folded(t)
        if c is not None:
            k += c
        else:
            acc = t if acc is None else b.add(acc, t)
    if acc is None:
        return i64(k)
    return b.add(acc, i64(k)) if k else acc


def mul(b: ir.IRBuilder, x: ir.Value | int, k: int) -> ir.Value | int:
    """``x * k``: folded when ``x`` is known (an int stays an int), no instruction for k=0, 1."""
    if isinstance(x, int):
        return x * k
    c = _folded(x)
    if c is not None:
        return ir.Constant(I64, c * k)
    if k == 0:
        return 0
    if k == 1:
        return x
    return b.mul(x, i64(k))


def in_range(b: ir.IRBuilder, x: ir.Value, lo: int, hi: int) -> ir.Value:
    """lo <= x < hi as one unsigned compare: (x - lo) <u (hi - lo)."""
    return b.icmp_unsigned("<", b.sub(x, i64(lo)), i64(hi - lo))


# -- constants and vectors --------------------------------------------------------------------


def vec(width: int) -> ir.VectorType:
    return ir.VectorType(F32, width)


def const(ty: ir.Type, value: float) -> ir.Constant:
    """``value`` as ``ty`` (float or a float vector, splatted)."""
    if isinstance(ty, ir.VectorType):
        return ir.Constant(ty, [ir.Constant(ty.element, float(value))] * ty.count)
    return ir.Constant(ty, float(value))


def splat(b: ir.IRBuilder, x: ir.Value, width: int) -> ir.Value:
    """``<width x T>`` with every lane ``x`` (any scalar type); width 1 is ``x`` itself."""
    if width == 1:
        return x
    ty = ir.VectorType(x.type, width)
    v = b.insert_element(ir.Constant(ty, ir.Undefined), x, ir.Constant(I32, 0))
    return b.shuffle_vector(
        v, ir.Constant(ty, ir.Undefined), ir.Constant(ir.VectorType(I32, width), [0] * width)
    )


def lane_mask(width: int, n_valid: int) -> ir.Constant:
    """Constant ``<W x i1>`` with the first ``n_valid`` lanes on."""
    return ir.Constant(ir.VectorType(I1, width), [1 if i < n_valid else 0 for i in range(width)])


# -- pointers, loads and stores ---------------------------------------------------------------


def elem_ptr(
    b: ir.IRBuilder, base: ir.Value, index: int | ir.Value, ty: ir.Type = F32, inbounds: bool = True
) -> ir.Value:
    """Pointer to element ``index`` of a ``ty`` array starting at ``base``. Pass
    ``inbounds=False`` for an address that may lie outside the buffer (a masked access at a
    padded border): an inbounds GEP there would be poison."""
    if isinstance(index, int) and index == 0:
        return base
    return b.gep(base, [i64(index)], source_etype=ty, inbounds=inbounds)


def byte_ptr(b: ir.IRBuilder, base: ir.Value, offset: int) -> ir.Value:
    return elem_ptr(b, base, offset, I8)


def load(b: ir.IRBuilder, base: ir.Value, index: int | ir.Value, width: int = 1) -> ir.Value:
    """``base[index]``: a float, or ``width`` consecutive floats as a vector."""
    p = elem_ptr(b, base, index)
    if width == 1:
        return b.load(p, typ=F32, align=4)
    return b.load(p, typ=vec(width), align=4)


def store(b: ir.IRBuilder, value: ir.Value, base: ir.Value, index: int | ir.Value) -> None:
    b.store(value, elem_ptr(b, base, index), align=4)


def vload(b: ir.IRBuilder, ptr: ir.Value, width: int) -> ir.Value:
    v = vec(width)
    return b.load(b.bitcast(ptr, ir.PointerType(v)), align=4, typ=v)


def vstore(b: ir.IRBuilder, value: ir.Value, ptr: ir.Value) -> None:
    b.store(value, b.bitcast(ptr, ir.PointerType(value.type)), align=4)


def masked_load(b: ir.IRBuilder, ptr: ir.Value, width: int, mask: ir.Value) -> ir.Value:
    """Load the lanes that ``mask`` selects; the others read as 0.0 and touch no memory."""
    v = vec(width)
    mt = ir.VectorType(I1, width)
    fn = declare(b.module, f"llvm.masked.load.v{width}f32.p0", v, [ir.PointerType(v), I32, mt, v])
    return b.call(fn, [b.bitcast(ptr, ir.PointerType(v)), ir.Constant(I32, 4), mask, const(v, 0.0)])


def masked_store(b: ir.IRBuilder, value: ir.Value, ptr: ir.Value, mask: ir.Value) -> None:
    """Store the lanes that ``mask`` selects; memory under the others is not touched."""
    width = value.type.count
    v = vec(width)
    mt = ir.VectorType(I1, width)
    fn = declare(
        b.module, f"llvm.masked.store.v{width}f32.p0", VOID, [v, ir.PointerType(v), I32, mt]
    )
    b.call(fn, [value, b.bitcast(ptr, ir.PointerType(v)), ir.Constant(I32, 4), mask])


def load_lanes(
    b: ir.IRBuilder, base: ir.Value, index: int | ir.Value, width: int, lanes: int
) -> ir.Value:
    """``base[index:index+lanes]`` as a ``width`` vector (a float when width is 1); a tail
    shorter than the vector is a masked load whose other lanes are 0.0."""
    if width == 1:
        return load(b, base, index)
    if lanes >= width:
        return load(b, base, index, width)
    return masked_load(b, elem_ptr(b, base, index), width, lane_mask(width, lanes))


def store_lanes(
    b: ir.IRBuilder, value: ir.Value, base: ir.Value, index: int | ir.Value, lanes: int
) -> None:
    """Store the first ``lanes`` lanes of ``value`` at ``base[index]`` (all of a scalar)."""
    if not isinstance(value.type, ir.VectorType) or lanes >= value.type.count:
        store(b, value, base, index)
    else:
        masked_store(b, value, elem_ptr(b, base, index), lane_mask(value.type.count, lanes))


def store_strided(
    b: ir.IRBuilder, value: ir.Value, base: ir.Value, index: ir.Value | int, stride: int, lanes: int
) -> None:
    """Scatter the first ``lanes`` lanes to ``base[index + j*stride]`` (NCHW outputs)."""
    if not isinstance(value.type, ir.VectorType):
        store(b, value, base, index)
        return
    for j in range(lanes):
        store(b, b.extract_element(value, ir.Constant(I32, j)), base, add(b, index, j * stride))


def masked_gather(b: ir.IRBuilder, base: ir.Value, index: ir.Value, mask: ir.Value) -> ir.Value:
    """``base[index[i]]`` for the lanes ``mask`` selects (0.0 elsewhere); ``index`` is a
    ``<W x i32>`` or ``<W x i64>`` vector (masked-off lanes may hold any index)."""
    width = index.type.count
    if index.type.element.width != 64:
        index = b.sext(index, ir.VectorType(I64, width))
    v = vec(width)
    pv = ir.VectorType(F32P, width)
    addr = b.add(
        splat(b, b.ptrtoint(base, I64), width),
        b.mul(index, ir.Constant(index.type, [4] * width)),
    )
    ptrs = b.inttoptr(addr, pv)
    fn = declare(
        b.module,
        f"llvm.masked.gather.v{width}f32.v{width}p0",
        v,
        [pv, I32, ir.VectorType(I1, width), v],
    )
    return b.call(fn, [ptrs, ir.Constant(I32, 4), mask, ir.Constant(v, 0.0)])


# -- intrinsics -------------------------------------------------------------------------------


def declare(module: ir.Module, name: str, ret: ir.Type, args: Sequence[ir.Type]) -> ir.Function:
    """The function ``name`` of ``module``, declared on first use."""
    if name in module.globals:
        return module.globals[name]
    return ir.Function(module, ir.FunctionType(ret, list(args)), name)


def intrinsic(b: ir.IRBuilder, name: str, ty: ir.Type, args: Sequence[ir.Value]) -> ir.Value:
    """Call an overloaded float intrinsic (``llvm.fma``, ``llvm.maxnum``...) for ``ty``."""
    suffix = f"v{ty.count}f32" if isinstance(ty, ir.VectorType) else "f32"
    fn = declare(b.module, f"llvm.{name}.{suffix}", ty, [ty] * len(args))
    return b.call(fn, list(args))


def fma(b: ir.IRBuilder, x: ir.Value, y: ir.Value, z: ir.Value) -> ir.Value:
    """x*y + z with one rounding (declared explicitly: ``llvm.fma.v16f32`` on AVX-512;
    llvmlite has no vector FMA helper)."""
    return intrinsic(b, "fma", x.type, [x, y, z])


def hsum(b: ir.IRBuilder, v: ir.Value) -> ir.Value:
    """Horizontal sum of a vector (reassociated)."""
    if not isinstance(v.type, ir.VectorType):
        return v
    fn = declare(b.module, f"llvm.vector.reduce.fadd.v{v.type.count}f32", F32, [F32, v.type])
    return b.call(fn, [ir.Constant(F32, -0.0), v], fastmath=REDUCE_FLAGS)


def hmax(b: ir.IRBuilder, v: ir.Value) -> ir.Value:
    """Horizontal maximum of a vector."""
    if not isinstance(v.type, ir.VectorType):
        return v
    fn = declare(b.module, f"llvm.vector.reduce.fmax.v{v.type.count}f32", F32, [v.type])
    return b.call(fn, [v])


# -- control flow -----------------------------------------------------------------------------


@contextmanager
def loop(
    b: ir.IRBuilder, start: int | ir.Value, stop: int | ir.Value, step: int = 1, name: str = "i"
) -> Iterator[ir.Value]:
    """A counted loop ``for i in range(start, stop, step)`` (bounds known at compile time,
    or i64 values known at run time).

    The body runs at least once only when the range is non-empty; an empty range emits
    nothing that executes (the branch is folded).
    """
    pre = b.block
    fn = b.function
    hdr = fn.append_basic_block(f"{name}.hdr")
    body = fn.append_basic_block(f"{name}.body")
    end = fn.append_basic_block(f"{name}.end")
    b.branch(hdr)
    b.position_at_end(hdr)
    i = b.phi(I64, name=name)
    i.add_incoming(i64(start), pre)
    b.cbranch(b.icmp_signed("<", i, i64(stop)), body, end)
    b.position_at_end(body)
    yield i
    nxt = b.add(i, i64(step))
    i.add_incoming(nxt, b.block)
    b.branch(hdr)
    b.position_at_end(end)


def entry_alloca(b: ir.IRBuilder, ty: ir.Type) -> ir.Value:
    """A stack slot in the entry block (so mem2reg/SROA keep it in a register)."""
    entry = b.function.entry_basic_block
    with b.goto_block(entry):
        b.position_at_start(entry)
        slot = b.alloca(ty)
    return slot


@contextmanager
def when(b: ir.IRBuilder, cond: ir.Value) -> Iterator[None]:
    with b.if_then(cond):
        yield


def for_loop(
    b: ir.IRBuilder, start: int, stop: int, step: int, body: Callable[[ir.Value], None]
) -> None:
    """Emit ``for i in range(start, stop, step): body(i)`` (i an i64 value); one trip is inlined."""

    def step_body(i: ir.Value, _vals: list[ir.Value]) -> list[ir.Value]:
        body(i)
        return []

    for_loop_carried(b, start, stop, step, [], step_body)


def for_loop_carried(
    b: ir.IRBuilder,
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
    fn = b.function
    pre = b.block
    head = fn.append_basic_block("loop")
    b.branch(head)
    b.position_at_end(head)
    idx = b.phi(I64, "i")
    idx.add_incoming(ir.Constant(I64, start), pre)
    phis = []
    for v in init:
        p = b.phi(v.type)
        p.add_incoming(v, pre)
        phis.append(p)
    out = list(body(idx, list(phis)))
    nxt = b.add(idx, ir.Constant(I64, step))
    latch = b.block
    idx.add_incoming(nxt, latch)
    for p, v in zip(phis, out, strict=True):
        p.add_incoming(v, latch)
    done = fn.append_basic_block("loop.end")
    b.cbranch(b.icmp_signed("<", nxt, ir.Constant(I64, stop)), head, done)
    b.position_at_end(done)
    return out


def tiles(b: ir.IRBuilder, total: int, tile: int, body: Callable[[ir.Value, int], None]) -> None:
    """Cover ``range(total)`` with tiles: a loop over full tiles, then the peeled short tail."""
    full = total // tile
    if full:
        for_loop(b, 0, full * tile, tile, lambda i: body(i, tile))
    if total % tile:
        body(ir.Constant(I64, full * tile), total % tile)


def for_loop_dynamic(
    b: ir.IRBuilder,
    count: ir.Value,
    init: Sequence[ir.Value],
    body: Callable[[ir.Value, list[ir.Value]], list[ir.Value]],
) -> list[ir.Value]:
    """``for i in range(count)`` with ``count`` an i64 known only at run time (may be 0)."""
    fn = b.function
    pre = b.block
    head = fn.append_basic_block("dloop")
    loop = fn.append_basic_block("dloop.body")
    done = fn.append_basic_block("dloop.end")
    b.branch(head)
    b.position_at_end(head)
    idx = b.phi(I64, "i")
    idx.add_incoming(ir.Constant(I64, 0), pre)
    phis = []
    for v in init:
        p = b.phi(v.type)
        p.add_incoming(v, pre)
        phis.append(p)
    b.cbranch(b.icmp_signed("<", idx, count), loop, done)
    b.position_at_end(loop)
    out = list(body(idx, list(phis)))
    latch = b.block
    idx.add_incoming(b.add(idx, ir.Constant(I64, 1)), latch)
    for p, v in zip(phis, out, strict=True):
        p.add_incoming(v, latch)
    b.branch(head)
    b.position_at_end(done)
    return list(phis)


def select_when(
    b: ir.IRBuilder, cond: ir.Value, vals: list[ir.Value], then: Callable[[], list[ir.Value]]
) -> list[ir.Value]:
    """``vals = then() if cond else vals`` (phis at the join)."""
    fn = b.function
    pre = b.block
    yes = fn.append_basic_block("when")
    join = fn.append_basic_block("when.end")
    b.cbranch(cond, yes, join)
    b.position_at_end(yes)
    new = then()
    yes_end = b.block
    b.branch(join)
    b.position_at_end(join)
    out = []
    for old, nv in zip(vals, new, strict=True):
        p = b.phi(old.type)
        p.add_incoming(old, pre)
        p.add_incoming(nv, yes_end)
        out.append(p)
    return out
