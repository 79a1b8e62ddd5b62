"""The requantise chain of a ``FusedConvInteger`` (passes/fuse_integer_epilogue.py) on the
int32 accumulator tile, in registers: the kernel stores the chain's bytes (or float32)
where ConvInteger stored int32.

The program is the FusedElementwise's, the accumulator read as ``"acc"`` and only through
a Cast to float32, the other operands float32 constants per output channel (or scalars).
The tile's accumulator is converted once (``sitofp``: round to nearest even, numpy's
``astype(float32)``) and the program runs in float lanes with the code of the standalone
chain (quant/byte_lanes.py's ``run`` over emit_elementwise's ops); a Cast to a byte after
an in-range Clip truncates, as the reference's does. So each element is what the two
nodes' references give, bit for bit.

The constants ride in the conv's packed block after its per-channel words: ``[K][n]``
float32, n the program's constant inputs in input order, a scalar repeated over K; the
micro-kernel of a row tile reads row ``i``'s n words at ``i * n``.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import llvmlite.ir as ir
import numpy as np

from guard.compiler.codegen.irutil import I8, I32
from guard.compiler.codegen.quant import byte_lanes as bl
from guard.compiler.ir.core import dtype_from_name

OUT = ("uint8", "int8", "float32")


def constant_inputs(program: Sequence[Mapping[str, Any]]) -> list[int]:
    """The input indices the program reads (its constants), in order."""
    return sorted({r for st in program for r in st["args"] if isinstance(r, int)})


def _lanes(program: Sequence[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """The program with the accumulator as input ``-1`` (byte_lanes' value references)."""
    return [{**st, "args": [-1 if r == "acc" else r for r in st["args"]]} for st in program]


def epilogue_decline(
    program: Sequence[Mapping[str, Any]], const_dtypes: Sequence[Any], out_dtype: Any
) -> str | None:  # fmt: skip
    """Why the kernel cannot run ``program`` on its accumulator, or None."""
    from guard.compiler.codegen.emit_elementwise import FLOAT_OPS

    if str(out_dtype) not in OUT:
        return f"an epilogue producing {out_dtype}"
    if any(str(d) != "float32" for d in const_dtypes):
        return "an epilogue reading a constant that is not float32"
    for st in program:
        if "acc" in st["args"] and (st["op"] != "Cast" or
                                    dtype_from_name(st["attrs"]["to"]) != np.float32):  # fmt: skip
            return f"an epilogue whose {st['op']} reads the int32 accumulator"
    steps = _lanes(program)
    n = max([0, *constant_inputs(program)]) + 1
    # inputs 0..n-1 float32 constants, then an unread byte (byte_program wants one byte
    # among the tensors; here the bytes are the program's own), index -1 the accumulator
    dtypes: list[np.dtype] = [np.dtype(np.float32)] * n + [np.dtype(np.uint8), np.dtype(np.float32)]
    if not bl.byte_program(steps, dtypes, np.dtype(str(out_dtype)), FLOAT_OPS):
        return "an epilogue that does not run in float lanes (quant/byte_lanes.py)"
    return None


def epilogue_key(program: Sequence[Mapping[str, Any]], out_dtype: Any) -> str:
    """The program and output type as one string: the kernels' cache key and argument."""
    return json.dumps({"program": list(program), "out": str(out_dtype)}, sort_keys=True)


def epilogue_words(
    program: Sequence[Mapping[str, Any]], values: Mapping[int, np.ndarray], k: int
) -> np.ndarray:  # fmt: skip
    """The ``[K][n]`` float32 constants as int32 words."""
    cols = []
    for j in constant_inputs(program):
        v = np.asarray(values[j], np.float32).reshape(-1)
        cols.append(np.broadcast_to(v, (k,)) if v.size in (1, k) else v[:k])
    table = np.stack(cols, axis=1) if cols else np.zeros((k, 0), np.float32)
    return np.ascontiguousarray(table, np.float32).view(np.int32).reshape(-1)


def apply_epilogue(
    b: ir.IRBuilder, key: str, acc: ir.Value, constant: Callable[[int], ir.Value]
) -> tuple[ir.Value, ir.Type]:  # fmt: skip
    """The program on the int32 vector ``acc``; ``constant(c)`` gives the c-th constant
    (in :func:`constant_inputs`' order) as a vector of acc's lanes. The result to store
    (an i8 or float vector) and its element type."""
    from guard.compiler.codegen.emit_elementwise import apply_op

    spec = json.loads(key)
    program = spec["program"]
    cols = constant_inputs(program)
    w = acc.type.count
    ft = ir.VectorType(ir.FloatType(), w)
    f = b.sitofp(acc, ft)

    def value_of(j: int) -> ir.Value:
        return f if j == -1 else constant(cols.index(j))

    v = bl.run(b, _lanes(program), value_of, apply_op)
    if spec["out"] == "float32":
        return v, ir.FloatType()
    return b.trunc(b.fptosi(v, ir.VectorType(I32, w)), ir.VectorType(I8, w)), I8
