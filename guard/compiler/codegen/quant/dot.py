"""The integer dot-product step of the int8 kernels, one implementation per capability.

Every int8 kernel reduces in groups of four: a 32-bit word of the *u* operand holds four
unsigned bytes (the activations, shifted into the class's domain by the packer), a word
of the *s* operand four signed bytes (the weights), and one step adds
``u0*s0 + u1*s1 + u2*s2 + u3*s3`` to each int32 lane, exactly, on every capability
(guard.compiler.ir.isa_table.INT_DOTS):

- ``avx512_vnni`` / ``avx_vnni``: ``vpdpbusd`` (``llvm.x86.avx512.vpdpbusd.512`` /
  ``.256``, which LLVM encodes as ``{vex} vpdpbusd`` for AVX-VNNI); it never saturates.
- ``avx2`` / ``avx512bw``: ``vpmaddwd`` on 16-bit halves, never ``vpmaddubsw`` (which
  saturates its 16-bit pair sums: onnxruntime issue 5849). The s operand is packed as two
  words per group (bytes 0 and 2, and 1 and 3, each sign-extended to 16 bits), the u
  word is split at run time into ``u & 0x00FF00FF`` and ``(u >> 8) & 0x00FF00FF``: two
  ``vpmaddwd`` give the four products' sums exactly.
- ``neon_i8mm``: ``usdot``.
- ``neon_dotprod``: ``sdot`` is signed x signed, so the packer stores ``u - 128``
  (:attr:`DotClass.delta`); the kernels' compensation term adds ``128 * sum(s)`` back.
- ``none`` / ``neon``: portable IR, one 32-bit multiply per byte (LLVM picks the
  instructions: ``pmulld`` on SSE4.1, ``mla`` on NEON).
"""

from __future__ import annotations

from dataclasses import dataclass

import llvmlite.ir as ir
import numpy as np

from guard.compiler.codegen.irutil import I8, I32, declare, splat


def ivec(width: int) -> ir.VectorType:
    return ir.VectorType(I32, width)


def iconst(width: int, value: int) -> ir.Constant:
    return ir.Constant(ivec(width), [value] * width)


@dataclass(frozen=True)
class DotClass:
    """One capability's dot step at ``width`` int32 lanes."""

    name: str
    width: int

    @property
    def s_words(self) -> int:
        """Words per group of four weights in the packed s operand."""
        return 2 if self.name in ("avx2", "avx512bw") else 1

    @property
    def delta(self) -> int:
        """What the packer subtracts from the u bytes (sdot multiplies signed bytes)."""
        return 128 if self.name == "neon_dotprod" else 0

    @property
    def u_signed(self) -> bool:
        """Whether the u bytes are read as signed (after :attr:`delta`)."""
        return self.delta != 0

    def prep_u(self, b: ir.IRBuilder, u: ir.Value) -> list[ir.Value]:
        """The u word (a scalar to broadcast, or a vector) as the step's operands, vectors."""
        W = self.width
        if self.name in ("avx2", "avx512bw"):
            lo_mask = 0x00FF00FF
            if isinstance(u.type, ir.VectorType):
                lo = b.and_(u, iconst(W, lo_mask))
                hi = b.and_(b.lshr(u, iconst(W, 8)), iconst(W, lo_mask))
                return [lo, hi]
            lo = b.and_(u, ir.Constant(I32, lo_mask))
            hi = b.and_(b.lshr(u, ir.Constant(I32, 8)), ir.Constant(I32, lo_mask))
            return [splat(b, lo, W), splat(b, hi, W)]
        if self.name in ("none", "neon"):
            v = u if isinstance(u.type, ir.VectorType) else splat(b, u, W)
            planes = []
            for k in range(4):
                p = b.lshr(v, iconst(W, 8 * k)) if k else v
                planes.append(b.and_(p, iconst(W, 0xFF)) if k < 3 else p)
            return planes
        return [u if isinstance(u.type, ir.VectorType) else splat(b, u, W)]

    def prep_s(self, b: ir.IRBuilder, words: list[ir.Value]) -> list[ir.Value]:
        """The s words of one group (``s_words`` scalars to broadcast, or vectors)."""
        W = self.width
        vs = [w if isinstance(w.type, ir.VectorType) else splat(b, w, W) for w in words]
        if self.name in ("none", "neon"):
            (v,) = vs
            out = []
            for k in range(4):
                p = b.shl(v, iconst(W, 24 - 8 * k)) if k < 3 else v
                out.append(b.ashr(p, iconst(W, 24)))
            return out
        return vs

    def dot(self, b: ir.IRBuilder, acc: ir.Value, u: list[ir.Value], s: list[ir.Value]) -> ir.Value:
        """``acc + sum of the four u x s byte products`` per lane (prepared operands)."""
        W, m = self.width, b.module
        vt = ivec(W)
        if self.name in ("avx512_vnni", "avx_vnni"):
            bits = 512 if W == 16 else 256
            fn = declare(m, f"llvm.x86.avx512.vpdpbusd.{bits}", vt, [vt, vt, vt])
            return b.call(fn, [acc, u[0], s[0]])
        if self.name in ("avx2", "avx512bw"):
            ht = ir.VectorType(ir.IntType(16), 2 * W)
            name = "llvm.x86.avx512.pmaddw.d.512" if W == 16 else "llvm.x86.avx2.pmadd.wd"
            fn = declare(m, name, vt, [ht, ht])
            for uu, ss in zip(u, s, strict=True):
                acc = b.add(acc, b.call(fn, [b.bitcast(uu, ht), b.bitcast(ss, ht)]))
            return acc
        if self.name in ("neon_i8mm", "neon_dotprod"):
            bt = ir.VectorType(I8, 4 * W)
            op = "usdot" if self.name == "neon_i8mm" else "sdot"
            fn = declare(m, f"llvm.aarch64.neon.{op}.v{W}i32.v{4 * W}i8", vt, [vt, bt, bt])
            return b.call(fn, [acc, b.bitcast(u[0], bt), b.bitcast(s[0], bt)])
        for uu, ss in zip(u, s, strict=True):
            acc = b.add(acc, b.mul(uu, ss))
        return acc


def pack_s_words(s: np.ndarray, dot: DotClass) -> np.ndarray:
    """Signed weight bytes ``[..., G, 4]`` (groups of four along the reduction) as the
    class's words ``[..., G, s_words]`` (int32): the four bytes little-endian, or for the
    vpmaddwd classes bytes 0 and 2 then 1 and 3 as sign-extended 16-bit halves."""
    s = np.asarray(s, np.int8)
    if dot.s_words == 1:
        return np.ascontiguousarray(s).view(np.int32)[..., 0:1].reshape(*s.shape[:-1], 1)
    halves = s.astype(np.int16)[..., [0, 2, 1, 3]]  # lo word: (s0, s2), hi word: (s1, s3)
    return np.ascontiguousarray(halves).view(np.int32).reshape(*s.shape[:-1], 2)
