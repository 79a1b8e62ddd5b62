"""QLinearConv, ConvInteger, QLinearMatMul, MatMulInteger: the int8 emitters.

Chosen by (op, dtype) here and by the target's integer dot-product capability in the
kernels (guard.compiler.ir.isa_table ``int_dot``; quant/dot.py). ``plan_constants`` sees
a node's constants together (weights, zero points, scales, bias) and packs them into one
block on the weights input (quant/pack.py), with the facts the kernel specialises on.
Everything the kernels need is exact integer arithmetic and one float32 multiply: every
capability gives the reference's bits (guard.compiler.reference.quant).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import llvmlite.ir as ir
import numpy as np

from guard.compiler.codegen.base import Emitter, Kernel
from guard.compiler.codegen.irutil import I8, I32
from guard.compiler.codegen.kernel_plan import Operand
from guard.compiler.codegen.quant import depthwise_dot as dwd
from guard.compiler.codegen.quant import pack as qp
from guard.compiler.codegen.quant.conv import conv_tile, emit_conv
from guard.compiler.codegen.quant.dot import DotClass
from guard.compiler.codegen.quant.epilogue import epilogue_decline, epilogue_key, epilogue_words
from guard.compiler.codegen.quant.geometry import QConvGeometry
from guard.compiler.codegen.quant.matmul import emit_matmul, matmul_tile
from guard.compiler.codegen.quant.ukr import ld
from guard.compiler.graph.exec_order import GraphView, OpNode
from guard.compiler.ir.isa_table import active_table

# input positions: activations, weights, their zero points, the three scales, y's zero
# point, the bias (None: the op has no such input)
SLOTS: dict[str, dict[str, int | None]] = {
    "QLinearConv": {"x": 0, "w": 3, "zx": 2, "zw": 5, "sx": 1, "sw": 4, "sy": 6, "zy": 7, "b": 8},
    "ConvInteger": {"x": 0, "w": 1, "zx": 2, "zw": 3, "sx": None, "sw": None, "sy": None,
                    "zy": None, "b": None},
    "QLinearMatMul": {"x": 0, "w": 3, "zx": 2, "zw": 5, "sx": 1, "sw": 4, "sy": 6, "zy": 7,
                      "b": 8},
    "MatMulInteger": {"x": 0, "w": 1, "zx": 2, "zw": 3, "sx": None, "sw": None, "sy": None,
                      "zy": None, "b": None},
}  # fmt: skip
SLOTS["FusedConvInteger"] = SLOTS["ConvInteger"]  # with the chain's constants after input 3
INT8 = ("uint8", "int8")


def _arg(node_args: Sequence[str], i: int | None) -> str:
    return node_args[i] if i is not None and i < len(node_args) else ""


def _size(shape: Sequence[int]) -> int:
    return int(np.prod(shape, dtype=np.int64))


class QuantLinear(Emitter):
    ops = frozenset(SLOTS)

    def decline(self, node: OpNode, g: GraphView) -> str | None:
        sl = SLOTS[node.op]
        t = g.tensors
        x, w = _arg(node.args, sl["x"]), _arg(node.args, sl["w"])
        y = node.outputs[0]
        conv = "Conv" in node.op
        what = f"no emitter for {node.op}"
        if t[x].dtype not in INT8 or t[w].dtype not in INT8:
            return f"{what} on {t[x].dtype} x {t[w].dtype} (uint8/int8 only)"
        if t[w].kind != "const":
            return f"{what} with run-time weights {w!r}"
        if node.op == "FusedConvInteger":
            if any(t[a].kind != "const" for a in node.args[4:] if a):
                return f"{what} with a run-time operand in its epilogue"
            why = epilogue_decline(node.attrs["program"], [t[a].dtype for a in node.args[4:]],
                                   t[y].dtype)  # fmt: skip
            if why:
                return f"{what}: {why}"
        elif t[y].dtype not in (("int32",) if "Integer" in node.op else INT8):
            return f"{what} producing {t[y].dtype}"
        for key in ("sx", "sw", "sy", "zy", "zw", "b"):
            v = _arg(node.args, sl[key])
            if v and t[v].kind != "const":
                return f"{what} with a run-time {key} ({v!r})"
        zx = _arg(node.args, sl["zx"])
        if zx and (t[zx].kind != "const" and "Integer" not in node.op):
            return f"{what} with a run-time zero point ({zx!r})"
        if zx and _size(t[zx].shape) != 1:
            return f"{what} with a per-row activation zero point ({zx!r})"
        sx = _arg(node.args, sl["sx"])
        if sx and _size(t[sx].shape) != 1:
            return f"{what} with a per-row activation scale ({sx!r})"
        if conv:
            if len(t[x].shape) != 4:
                return f"{what} with {len(t[x].shape) - 2} spatial dims (2-D only)"
            if node.attrs.get("layout", "NCHW") != "NCHW":
                return f"{what} in layout {node.attrs['layout']}"
        else:
            if len(t[w].shape) != 2 or len(t[x].shape) < 2:
                return (
                    f"{what} with a {len(t[x].shape)}-D A and a {len(t[w].shape)}-D B (2-D B only)"
                )
        return None

    def plan_constants(
        self, op: str, attrs: Mapping[str, Any], values: Mapping[int, np.ndarray],
        inputs: Sequence[Operand | None], outputs: Sequence[Operand], width: int,
        target: Any = None,
    ) -> tuple[dict[int, np.ndarray], dict[str, Any]] | None:  # fmt: skip
        """The weights input packed with every per-channel constant (quant/pack.py), and
        the facts the kernel specialises on (they join the step's attributes); the
        target's table is the active one (``target`` is not read)."""
        sl = SLOTS[op]
        wi = sl["w"]
        assert wi is not None
        if wi not in values:
            return None
        table = active_table(width)
        dot = DotClass(table.int_dot, width)

        def val(key: str) -> np.ndarray | None:
            i = sl[key]
            return None if i is None else values.get(i)

        w = values[wi]
        xo = inputs[0]
        assert xo is not None
        xs = xo.shape
        sha = qp.activation_shift(xo.dtype)
        zx = val("zx")
        zi = sl["zx"]
        runtime_zx = zx is None and zi is not None and zi < len(inputs) and inputs[zi] is not None
        alpha = None
        if not runtime_zx:
            alpha = int(0 if zx is None else np.asarray(zx).reshape(-1)[0]) + sha - dot.delta
        if "Conv" in op:
            geo = QConvGeometry.of(attrs, xs, w.shape)
            direct = None if runtime_zx else dwd.plan(op, geo, dot, target, w, val, xo.dtype)
            if direct is not None:  # the direct depthwise kernels (quant/depthwise*.py)
                zyv = val("zy")
                zy_d = 0 if zyv is None else int(np.asarray(zyv).reshape(-1)[0])
                f = qp.facts(dot, None, np.zeros(1), outputs[0].dtype, attrs, zy_d)
                return {wi: direct[0]}, {**f, **direct[1]}
            mr, _ = conv_tile(geo, width, table.registers)
            words, s_sum, shw, kp = qp.conv_weights(w, dot, mr, geo.Kg)
            n_ch = padded = w.shape[0]
        else:
            _, nv = matmul_tile(_rows(xs), w.shape[1], width, table.registers)
            words, s_sum, shw, kp, padded = qp.matmul_weights(w, dot, nv * width)
            n_ch = w.shape[1]
        beta = qp.per_channel(val("zw"), n_ch) - shw
        bias = qp.per_channel(val("b"), n_ch)
        mult = qp.requant_multiplier(val("sx"), val("sw"), val("sy"), n_ch)
        parts = [words, qp.channel_words(s_sum, beta, bias, alpha, kp, mult, padded)]
        if op == "FusedConvInteger":  # the chain's constants, [K][n] (quant/ukr.py)
            parts.append(epilogue_words(attrs["program"], values, n_ch))
        block = np.concatenate(parts)
        zy = val("zy")
        zy_int = 0 if zy is None else int(np.asarray(zy).reshape(-1)[0])
        out_dtype = "int32" if op == "FusedConvInteger" else outputs[0].dtype
        f = qp.facts(dot, alpha, beta, out_dtype, attrs, zy_int)
        if "Conv" not in op:
            f["q_nv"] = nv  # the packing's panel: every row task's kernel reads it so
        return {wi: block}, f

    def emit(
        self, b: ir.IRBuilder, ins: list[ir.Value | None], outs: list[ir.Value], k: Kernel
    ) -> None:
        sl = SLOTS[k.op]
        xo, wo, yo = k.inputs[0], k.inputs[sl["w"]], k.outputs[0]  # type: ignore[index]
        assert xo is not None and wo is not None
        if dwd.emit(b, k, ins[0], ins[sl["w"]], outs[0]):  # type: ignore[index]
            return
        table = active_table(k.vector_width)
        dot = DotClass(str(k.attrs["q_dot"]), k.vector_width)
        out = {"int32": "i32", "uint8": "u8", "int8": "s8", "float32": "f32"}[yo.dtype]
        epilogue = epilogue_key(k.attrs["program"], yo.dtype) if k.op == "FusedConvInteger" else ""
        x_signed = xo.dtype == "int8"
        alpha_rt = None
        if k.attrs["q_alpha"] is None:
            zi = sl["zx"]
            assert zi is not None
            zo = k.inputs[zi]
            zp = ins[zi]
            assert zo is not None and zp is not None
            z = ld(b, zp, I8)
            z32 = b.sext(z, I32) if zo.dtype == "int8" else b.zext(z, I32)
            alpha_rt = b.add(z32, ir.Constant(I32, qp.activation_shift(xo.dtype) - dot.delta))
        portable = table.isa == "sse"
        x, packed = ins[0], ins[sl["w"]]  # type: ignore[index]
        assert x is not None and packed is not None
        if "Conv" in k.op:
            geo = QConvGeometry.of(k.attrs, xo.shape, wo.shape)
            if dot.width == 16 and not geo.flat and geo.OW <= 8 and dot.name.startswith("avx512"):
                # Rows of 8 pixels or fewer in 256-bit vectors (AVX512VL): a 16-lane panel
                # left half its lanes empty, and on double-pumped AVX-512 (Zen 4) a 256-bit
                # step costs half a 512-bit one. The same integer steps: the same bits.
                dot = DotClass(dot.name, 8)
            emit_conv(b, geo, dot, table.registers, x, packed, outs[0], out, k.attrs, x_signed,
                      alpha_rt, portable, epilogue)  # fmt: skip
        else:
            M, K, N = _rows(xo.shape), xo.shape[-1], wo.shape[1]
            emit_matmul(b, M, N, K, dot, table.registers, int(k.attrs["q_nv"]), x, packed,
                        outs[0], out, k.attrs, x_signed, alpha_rt, portable)  # fmt: skip


def _rows(shape: Sequence[int]) -> int:
    return _size(shape[:-1])
