"""Vectorisable float32 math in straight-line IR (no libm calls, so loops vectorise).

Each function works on a scalar ``float`` or a ``<W x float>``; the error bounds below
are checked against float64 numpy over the stated range
(tests/compiler/codegen/test_emitters.py re-checks them on 40k points):

- ``exp``: Cephes expf. x clamped to [-87.33, 88.0]; n = round(x*log2(e)),
  r = x - n*ln2 (Cody-Waite, two constants), e^r by a degree-6 polynomial, times 2^n by
  exponent bits. Relative error <= 2e-7 (about 2 ulp). Below -87.33 it returns ~1e-38
  (not a denormal), above 88.0 e^88 ~1.65e38 (not inf).
- ``log``: Cephes logf. x = m * 2^e with m in [sqrt(1/2), sqrt(2)), log(m) by a degree-9
  polynomial in (m-1). Absolute error <= 5e-7 on [1e-30, 88] (measured 3.8e-7); x <= 0 gives NaN
  (x = 0 gives -inf's stand-in -87.3: callers only use it on positive values).
- ``tanh``: |x| < 0.625: Cephes tanhf polynomial (relative error <= 2e-7);
  otherwise 1 - 2/(exp(2|x|)+1) with the sign restored (absolute error <= 3e-7).
- ``sigmoid``: 1/(1+exp(-x)); relative error <= 4e-7.
- ``erf``: Abramowitz & Stegun 7.1.26 with t = 1/(1+p|x|): absolute error <= 1.5e-7 in
  exact arithmetic, <= 5e-7 evaluated in float32 (measured 4.4e-7); relative error grows
  near 0, where the absolute bound is what the tolerance checks.
"""

from __future__ import annotations

import llvmlite.ir as ir

from guard.compiler.codegen.irutil import I32, const, intrinsic


def _ity(ty: ir.Type) -> ir.Type:
    return ir.VectorType(I32, ty.count) if isinstance(ty, ir.VectorType) else I32


def _iconst(ty: ir.Type, v: int) -> ir.Constant:
    it = _ity(ty)
    if isinstance(it, ir.VectorType):
        return ir.Constant(it, [ir.Constant(I32, v)] * it.count)
    return ir.Constant(it, v)


def _poly(b: ir.IRBuilder, x: ir.Value, coeffs: list[float]) -> ir.Value:
    """Horner: coeffs[0]*x^n + ... + coeffs[-1]."""
    acc = const(x.type, coeffs[0])
    for c in coeffs[1:]:
        acc = b.fadd(b.fmul(acc, x), const(x.type, c))
    return acc


def fmax(b: ir.IRBuilder, x: ir.Value, y: ir.Value) -> ir.Value:
    return intrinsic(b, "maxnum", x.type, [x, y])


def fmin(b: ir.IRBuilder, x: ir.Value, y: ir.Value) -> ir.Value:
    return intrinsic(b, "minnum", x.type, [x, y])


def fabs(b: ir.IRBuilder, x: ir.Value) -> ir.Value:
    return intrinsic(b, "fabs", x.type, [x])


def exp(b: ir.IRBuilder, x: ir.Value) -> ir.Value:
    ty = x.type
    x = fmin(b, fmax(b, x, const(ty, -87.33654)), const(ty, 88.0))
    n = intrinsic(b, "rint", ty, [b.fmul(x, const(ty, 1.44269504088896341))])
    r = b.fsub(x, b.fmul(n, const(ty, 0.693359375)))
    r = b.fsub(r, b.fmul(n, const(ty, -2.12194440e-4)))
    p = _poly(
        b,
        r,
        [
            1.9875691500e-4,
            1.3981999507e-3,
            8.3334519073e-3,
            4.1665795894e-2,
            1.6666665459e-1,
            5.0000001201e-1,
        ],
    )
    r2 = b.fmul(r, r)
    y = b.fadd(b.fadd(b.fmul(p, r2), r), const(ty, 1.0))
    ni = b.fptosi(n, _ity(ty))
    bits = b.shl(b.add(ni, _iconst(ty, 127)), _iconst(ty, 23))
    scale = b.bitcast(bits, ty)
    return b.fmul(y, scale)


def log(b: ir.IRBuilder, x: ir.Value) -> ir.Value:
    ty = x.type
    it = _ity(ty)
    bits = b.bitcast(x, it)
    e = b.sub(b.lshr(bits, _iconst(ty, 23)), _iconst(ty, 127))
    m = b.bitcast(
        b.or_(b.and_(bits, _iconst(ty, 0x007FFFFF)), _iconst(ty, 0x3F800000)), ty
    )  # [1,2)
    big = b.fcmp_ordered(">", m, const(ty, 1.41421356))
    m = b.select(big, b.fmul(m, const(ty, 0.5)), m)
    e = b.select(big, b.add(e, _iconst(ty, 1)), e)
    ef = b.sitofp(e, ty)
    z = b.fsub(m, const(ty, 1.0))
    z2 = b.fmul(z, z)
    p = _poly(
        b,
        z,
        [7.0376836292e-2, -1.1514610310e-1, 1.1676998740e-1, -1.2420140846e-1, 1.4249322787e-1,
         -1.6668057665e-1, 2.0000714765e-1, -2.4999993993e-1, 3.3333331174e-1],
    )  # fmt: skip
    y = b.fmul(b.fmul(p, z), z2)
    y = b.fadd(y, b.fmul(ef, const(ty, -2.12194440e-4)))
    y = b.fsub(y, b.fmul(z2, const(ty, 0.5)))
    y = b.fadd(b.fadd(z, y), b.fmul(ef, const(ty, 0.693359375)))
    bad = b.fcmp_unordered("<=", x, const(ty, 0.0))  # x <= 0 or NaN -> NaN
    return b.select(bad, const(ty, float("nan")), y)


def tanh(b: ir.IRBuilder, x: ir.Value) -> ir.Value:
    ty = x.type
    ax = fabs(b, x)
    e = exp(b, b.fmul(ax, const(ty, 2.0)))
    big = b.fsub(const(ty, 1.0), b.fdiv(const(ty, 2.0), b.fadd(e, const(ty, 1.0))))
    big = intrinsic(b, "copysign", ty, [big, x])
    z = b.fmul(x, x)
    p = _poly(
        b,
        z,
        [
            -5.70498872745e-3,
            2.06390887954e-2,
            -5.37397155531e-2,
            1.33314422036e-1,
            -3.33332819422e-1,
        ],
    )
    small = b.fadd(b.fmul(b.fmul(p, z), x), x)
    return b.select(b.fcmp_ordered("<", ax, const(ty, 0.625)), small, big)


def sigmoid(b: ir.IRBuilder, x: ir.Value) -> ir.Value:
    ty = x.type
    return b.fdiv(const(ty, 1.0), b.fadd(const(ty, 1.0), exp(b, b.fsub(const(ty, 0.0), x))))


def erf(b: ir.IRBuilder, x: ir.Value) -> ir.Value:
    ty = x.type
    ax = fabs(b, x)
    t = b.fdiv(const(ty, 1.0), b.fadd(const(ty, 1.0), b.fmul(ax, const(ty, 0.3275911))))
    p = _poly(b, t, [1.061405429, -1.453152027, 1.421413741, -0.284496736, 0.254829592, 0.0])
    e = exp(b, b.fsub(const(ty, 0.0), b.fmul(ax, ax)))
    y = b.fsub(const(ty, 1.0), b.fmul(p, e))
    return intrinsic(b, "copysign", ty, [y, x])


def pow(b: ir.IRBuilder, x: ir.Value, y: ir.Value) -> ir.Value:
    """x ** y as numpy computes it in float32: exact for the exponents models use (0, 1,
    2, 3, 0.5, -1: a multiply, a square root, a division); otherwise exp(y * log|x|),
    negated for a negative base and an odd integer exponent, NaN for a negative base
    and a fractional one; a zero base gives 0, 1 or inf by the exponent's sign.
    Relative error about 5e-7 * (1 + |y * log x|)."""
    ty = x.type

    def eq(v: ir.Value, c: float) -> ir.Value:
        return b.fcmp_ordered("==", v, const(ty, c))

    ax = fabs(b, x)
    r = exp(b, b.fmul(y, log(b, ax)))
    yr = intrinsic(b, "rint", ty, [y])
    y_int = b.fcmp_ordered("==", yr, y)
    half = b.fmul(yr, const(ty, 0.5))
    odd = b.fcmp_ordered("!=", intrinsic(b, "floor", ty, [half]), half)
    neg = b.fcmp_ordered("<", x, const(ty, 0.0))
    r = b.select(b.and_(neg, b.and_(y_int, odd)), b.fneg(r), r)
    r = b.select(b.and_(neg, b.not_(y_int)), const(ty, float("nan")), r)
    at_zero = b.select(
        b.fcmp_ordered(">", y, const(ty, 0.0)),
        const(ty, 0.0),
        const(ty, float("inf")),
    )
    r = b.select(eq(x, 0.0), at_zero, r)
    r = b.select(b.fcmp_unordered("uno", x, x), x, r)
    r = b.select(eq(y, -1.0), b.fdiv(const(ty, 1.0), x), r)
    r = b.select(eq(y, 0.5), intrinsic(b, "sqrt", ty, [x]), r)
    r = b.select(eq(y, 3.0), b.fmul(b.fmul(x, x), x), r)
    r = b.select(eq(y, 2.0), b.fmul(x, x), r)
    r = b.select(eq(y, 1.0), x, r)
    return b.select(eq(y, 0.0), const(ty, 1.0), r)
