"""Requantise chains on bytes in float32 vectors (quant/byte_lanes.py): the SE block's
``DQ(x) * g[c] -> Q`` and a lone DequantizeLinear take byte vector loads and stores (with
a quantized gate, ``DQ(x) * DQ(g[c]) -> Q``, a 256 x 256 byte table where the target
looks bytes up, quant/lut.py; byte vectors elsewhere), and
equal the reference interpreter bit for bit on the host's class, x86-64-v3 and
skylake-avx512 at 1 and 2 threads (rows with a tail, a broadcast operand); integer
arithmetic on bytes (which wraps) and a Cast to a byte without a Clip stay on the typed
path."""

from __future__ import annotations

import re

import numpy as np
import pytest
from onnx import TensorProto, helper, numpy_helper

from guard.compiler import import_onnx, optimize, run_reference
from guard.compiler.codegen.build import host_target, jit
from guard.compiler.codegen.emit_elementwise import FLOAT_OPS
from guard.compiler.codegen.quant.byte_lanes import byte_program
from guard.compiler.ir.isa_table import table_for
from guard.compiler.partition.plan import plan

from ._jit import TARGETS, skip_unless_runnable

F, U8 = TensorProto.FLOAT, TensorProto.UINT8
ISAS = ["host", *TARGETS]
SHAPE = [1, 6, 3, 37]


def model(kind: str):
    """kind: "se" (x u8, g f32 [1,C,1,1]: DQ(x) * g -> Q -> u8), "dq" (DQ(x) -> f32),
    "wrap" (x + x on u8: integer arithmetic)."""
    inits = [numpy_helper.from_array(np.float32(0.043), "s"),
             numpy_helper.from_array(np.uint8(121), "z"),
             numpy_helper.from_array(np.float32(0.021), "sy"),
             numpy_helper.from_array(np.uint8(7), "zy")]  # fmt: skip
    ins = [helper.make_tensor_value_info("x", U8, SHAPE)]
    if kind == "se":
        ins.append(helper.make_tensor_value_info("g", F, [1, SHAPE[1], 1, 1]))
        nodes = [helper.make_node("DequantizeLinear", ["x", "s", "z"], ["xd"]),
                 helper.make_node("Mul", ["xd", "g"], ["m"]),
                 helper.make_node("QuantizeLinear", ["m", "sy", "zy"], ["y"])]  # fmt: skip
        out = helper.make_tensor_value_info("y", U8, None)
    elif kind == "se2":  # the gate quantized too: DQ(x) * DQ(g[c]) -> Q
        ins.append(helper.make_tensor_value_info("g", U8, [1, SHAPE[1], 1, 1]))
        nodes = [helper.make_node("DequantizeLinear", ["x", "s", "z"], ["xd"]),
                 helper.make_node("DequantizeLinear", ["g", "sy", "zy"], ["gd"]),
                 helper.make_node("Mul", ["xd", "gd"], ["m"]),
                 helper.make_node("QuantizeLinear", ["m", "sy", "zy"], ["y"])]  # fmt: skip
        out = helper.make_tensor_value_info("y", U8, None)
    elif kind == "dq":
        nodes = [helper.make_node("DequantizeLinear", ["x", "s", "z"], ["y"])]
        out = helper.make_tensor_value_info("y", F, None)
    else:
        nodes = [helper.make_node("Add", ["x", "x"], ["y"])]
        out = helper.make_tensor_value_info("y", U8, None)
    g = helper.make_graph(nodes, "bytes", ins, [out], inits)
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])


def _feeds(kind: str, seed: int) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(seed)
    f = {"x": rng.integers(0, 256, SHAPE).astype(np.uint8)}
    if kind == "se":
        f["g"] = rng.uniform(0, 1, (1, SHAPE[1], 1, 1)).astype(np.float32)
    if kind == "se2":
        f["g"] = rng.integers(0, 256, (1, SHAPE[1], 1, 1)).astype(np.uint8)
    return f


@pytest.mark.parametrize("isa", ISAS)
@pytest.mark.parametrize("kind", ["se", "se2", "dq", "wrap"])
def test_byte_chains_run_in_vectors_and_equal_the_reference(isa, kind):
    target = host_target() if isa == "host" else skip_unless_runnable(isa)
    table = None if isa == "host" else table_for(isa)
    g, _ = optimize(import_onnx(model(kind)), "O2", target=table, verify_each=True)
    compiled = plan(g)
    assert compiled.partition_report["count"] == 1, dict(compiled.partitions.declines)
    rt1, code = jit(compiled, target, threads=1)
    rt2, _ = jit(compiled, target, threads=2, code=code)
    w = {"avx512": 16, "avx2": 8}[target.isa]
    vec_bytes = re.search(rf"uitofp <{w} x i8>", code.generated.ir_text) is not None
    table2 = any("q_lut2" in st.attrs for st in code.plan.steps())
    if kind == "se2" and target.byte_lookup == "vbmi":  # T[g[c]][x] (quant/lut.py)
        assert table2 and not vec_bytes
    else:
        assert vec_bytes == (kind != "wrap") and not table2, kind
    for seed in (0, 1):
        ref = run_reference(g, _feeds(kind, seed))["y"]
        np.testing.assert_array_equal(rt1.run(_feeds(kind, seed))["y"], ref)
        np.testing.assert_array_equal(rt2.run(_feeds(kind, seed))["y"], ref)


def test_a_cast_to_a_byte_without_a_clip_declines():
    u8, f32 = np.dtype(np.uint8), np.dtype(np.float32)
    clipped = [{"op": "Cast", "args": [0], "attrs": {"to": "f32"}},
               {"op": "Clip", "args": ["s0"], "attrs": {"min": 0.0, "max": 255.0}},
               {"op": "Cast", "args": ["s1"], "attrs": {"to": "u8"}}]  # fmt: skip
    assert byte_program(clipped, [u8], u8, FLOAT_OPS)
    bare = [clipped[0], {"op": "Cast", "args": ["s0"], "attrs": {"to": "u8"}}]
    assert not byte_program(bare, [u8], u8, FLOAT_OPS)
    wide = [clipped[0], {"op": "Clip", "args": ["s0"], "attrs": {"min": -1.0, "max": 255.0}},
            clipped[2]]  # fmt: skip
    assert not byte_program(wide, [u8], u8, FLOAT_OPS)
    assert not byte_program([{"op": "Add", "args": [0, 0], "attrs": {}}], [u8], u8, FLOAT_OPS)
    assert not byte_program([{"op": "Relu", "args": [0], "attrs": {}}], [f32], f32, FLOAT_OPS)
