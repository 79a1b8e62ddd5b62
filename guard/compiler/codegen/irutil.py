"""Small helpers over llvmlite.ir: constants, counted loops, vectors, masks, intrinsics.

Every emitter builds its loops with :func:`loop` (a counted loop with compile-time bounds,
which LLVM unrolls and vectorises) and reads/writes through :func:`elem_ptr` (a typed GEP
on an opaque pointer). Values may be scalars (``float``) or vectors (``<W x float>``); the
helpers that make constants splat them to the value's type.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from contextlib import contextmanager

import llvmlite.ir as ir

F32 = ir.FloatType()
I1 = ir.IntType(1)
I8 = ir.IntType(8)
I32 = ir.IntType(32)
I64 = ir.IntType(64)
PTR = ir.PointerType()
VOID = ir.VoidType()

# Float math that may be reassociated (reductions vectorise only with it). Elementwise
# code does not use it: its results stay bit-comparable with the reference up to the
# approximations documented in mathfn.py.
REDUCE_FLAGS = ("reassoc", "nsz", "contract")


def i64(v: int | ir.Value) -> ir.Value:
    return v if isinstance(v, ir.Value) else ir.Constant(I64, int(v))


def vec(width: int) -> ir.VectorType:
    return ir.VectorType(F32, width)


def const(ty: ir.Type, value: float) -> ir.Constant:
    """``value`` as ``ty`` (float or a float vector, splatted)."""
    if isinstance(ty, ir.VectorType):
        return ir.Constant(ty, [ir.Constant(ty.element, float(value))] * ty.count)
    return ir.Constant(ty, float(value))


def splat(b: ir.IRBuilder, x: ir.Value, width: int) -> ir.Value:
    if width == 1:
        return x
    ty = vec(width)
    v = b.insert_element(ir.Constant(ty, ir.Undefined), x, ir.Constant(I32, 0))
    return b.shuffle_vector(
        v, ir.Constant(ty, ir.Undefined), ir.Constant(ir.VectorType(I32, width), [0] * width)
    )


def elem_ptr(b: ir.IRBuilder, base: ir.Value, index: int | ir.Value, ty: ir.Type = F32) -> ir.Value:
    """Pointer to element ``index`` of a ``ty`` array starting at ``base``."""
    if isinstance(index, int) and index == 0:
        return base
    return b.gep(base, [i64(index)], source_etype=ty, inbounds=True)


def byte_ptr(b: ir.IRBuilder, base: ir.Value, offset: int) -> ir.Value:
    return elem_ptr(b, base, offset, I8)


def load(b: ir.IRBuilder, base: ir.Value, index: int | ir.Value, width: int = 1) -> ir.Value:
    p = elem_ptr(b, base, index)
    if width == 1:
        return b.load(p, typ=F32, align=4)
    return b.load(p, typ=vec(width), align=4)


def store(b: ir.IRBuilder, value: ir.Value, base: ir.Value, index: int | ir.Value) -> None:
    b.store(value, elem_ptr(b, base, index), align=4)


def add(b: ir.IRBuilder, *terms: int | ir.Value) -> ir.Value:
    """Sum of i64 terms (ints folded), for index arithmetic."""
    k = sum(t for t in terms if isinstance(t, int))
    vals = [t for t in terms if not isinstance(t, int)]
    acc: ir.Value | None = None
    for v in vals:
        acc = v if acc is None else b.add(acc, v)
    if acc is None:
        return i64(k)
    return b.add(acc, i64(k)) if k else acc


def mul(b: ir.IRBuilder, x: ir.Value | int, k: int) -> ir.Value | int:
    if isinstance(x, int):
        return x * k
    if k == 0:
        return 0
    if k == 1:
        return x
    return b.mul(x, i64(k))


@contextmanager
def loop(
    b: ir.IRBuilder, start: int, stop: int, step: int = 1, name: str = "i"
) -> Iterator[ir.Value]:
    """A counted loop ``for i in range(start, stop, step)`` with compile-time bounds.

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


def in_range(b: ir.IRBuilder, x: ir.Value, lo: int, hi: int) -> ir.Value:
    """lo <= x < hi as one unsigned compare: (x - lo) <u (hi - lo)."""
    return b.icmp_unsigned("<", b.sub(x, i64(lo)), i64(hi - lo))


def intrinsic(b: ir.IRBuilder, name: str, ty: ir.Type, args: Sequence[ir.Value]) -> ir.Value:
    """Call an overloaded float intrinsic (``llvm.fma``, ``llvm.maxnum``...) for ``ty``."""
    suffix = f"v{ty.count}f32" if isinstance(ty, ir.VectorType) else "f32"
    mod = b.module
    full = f"llvm.{name}.{suffix}"
    fn = mod.globals.get(full)
    if fn is None:
        fn = ir.Function(mod, ir.FunctionType(ty, [ty] * len(args)), full)
    return b.call(fn, list(args))


def fma(b: ir.IRBuilder, x: ir.Value, y: ir.Value, z: ir.Value) -> ir.Value:
    """x*y + z, fused (declared explicitly: ``llvm.fma.v16f32`` on AVX-512)."""
    return intrinsic(b, "fma", x.type, [x, y, z])


def masked_store(
    b: ir.IRBuilder, value: ir.Value, base: ir.Value, index: int | ir.Value, lanes: int
) -> None:
    """Store the first ``lanes`` lanes of a vector (a peeled tail, constant mask)."""
    w = value.type.count
    mod = b.module
    name = f"llvm.masked.store.v{w}f32.p0"
    fn = mod.globals.get(name)
    mask_ty = ir.VectorType(I1, w)
    if fn is None:
        fn = ir.Function(mod, ir.FunctionType(VOID, [value.type, PTR, I32, mask_ty]), name)
    mask = ir.Constant(mask_ty, [ir.Constant(I1, int(j < lanes)) for j in range(w)])
    b.call(fn, [value, elem_ptr(b, base, index), ir.Constant(I32, 4), mask])


def masked_load(
    b: ir.IRBuilder, base: ir.Value, index: int | ir.Value, width: int, lanes: int
) -> ir.Value:
    """Load the first ``lanes`` lanes (the rest are 0.0); never reads past them."""
    mod = b.module
    ty = vec(width)
    name = f"llvm.masked.load.v{width}f32.p0"
    fn = mod.globals.get(name)
    mask_ty = ir.VectorType(I1, width)
    if fn is None:
        fn = ir.Function(mod, ir.FunctionType(ty, [PTR, I32, mask_ty, ty]), name)
    mask = ir.Constant(mask_ty, [ir.Constant(I1, int(j < lanes)) for j in range(width)])
    return b.call(fn, [elem_ptr(b, base, index), ir.Constant(I32, 4), mask, const(ty, 0.0)])


def load_lanes(
    b: ir.IRBuilder, base: ir.Value, index: int | ir.Value, width: int, lanes: int
) -> ir.Value:
    if width == 1:
        return load(b, base, index)
    return (
        load(b, base, index, width) if lanes >= width else masked_load(b, base, index, width, lanes)
    )


def store_lanes(
    b: ir.IRBuilder, value: ir.Value, base: ir.Value, index: int | ir.Value, lanes: int
) -> None:
    if not isinstance(value.type, ir.VectorType):
        store(b, value, base, index)
    elif lanes >= value.type.count:
        store(b, value, base, index)
    else:
        masked_store(b, value, base, index, lanes)


def store_strided(
    b: ir.IRBuilder, value: ir.Value, base: ir.Value, index: ir.Value | int, stride: int, lanes: int
) -> None:
    """Scatter the first ``lanes`` lanes to ``base[index + j*stride]`` (NCHW outputs)."""
    if not isinstance(value.type, ir.VectorType):
        store(b, value, base, index)
        return
    for j in range(lanes):
        store(b, b.extract_element(value, ir.Constant(I32, j)), base, add(b, index, j * stride))


def hsum(b: ir.IRBuilder, v: ir.Value) -> ir.Value:
    """Horizontal sum of a vector (reassociated)."""
    if not isinstance(v.type, ir.VectorType):
        return v
    mod = b.module
    name = f"llvm.vector.reduce.fadd.v{v.type.count}f32"
    fn = mod.globals.get(name)
    if fn is None:
        fn = ir.Function(mod, ir.FunctionType(F32, [F32, v.type]), name)
    return b.call(fn, [ir.Constant(F32, -0.0), v], fastmath=REDUCE_FLAGS)


def hmax(b: ir.IRBuilder, v: ir.Value) -> ir.Value:
    if not isinstance(v.type, ir.VectorType):
        return v
    mod = b.module
    name = f"llvm.vector.reduce.fmax.v{v.type.count}f32"
    fn = mod.globals.get(name)
    if fn is None:
        fn = ir.Function(mod, ir.FunctionType(F32, [v.type]), name)
    return b.call(fn, [v])
