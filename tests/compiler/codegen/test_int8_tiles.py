"""The int8 matmul micro-tile (quant/matmul.py matmul_tile): rows in multiples of the
tile and a remainder, equal to the reference on the host and AVX2 at 1 and 2 threads,
and the VNNI tile's loop keeps its accumulators in registers."""

from __future__ import annotations

import re

import llvmlite.binding as llvm
import numpy as np
import pytest
from onnx import TensorProto, helper, numpy_helper

from guard.compiler import import_onnx, optimize
from guard.compiler.codegen.build import generate
from guard.compiler.codegen.llvm_target import codegen_target, host_target
from guard.compiler.codegen.quant.matmul import matmul_tile
from guard.compiler.partition.plan import plan
from guard.compiler.runtime.weights import pack_weights

from .test_int8 import CLASSES, _target, _weights, check, integer_ops, qmatmul


def symmetric_matmuls(m: int = 128, ks: tuple = (256, 512), n: int = 256, seed: int = 0):
    """Two MatMulIntegers of different depth (one micro-kernel variant, its k a run-time
    value) with a run-time activation zero point and symmetric weights (zero points 0),
    as onnxruntime's quantize_dynamic writes a transformer's; their int32 sum is ``y``."""
    rng = np.random.default_rng(seed)
    names = [f"x{i}" for i in range(len(ks))]
    inits = {f"w{i}": _weights(rng, (k, n), np.int8) for i, k in enumerate(ks)}
    inits["zw"] = np.zeros(n, np.int8)
    nodes = [
        helper.make_node("MatMulInteger", [x, f"w{i}", "zx", "zw"], [f"p{i}"])
        for i, x in enumerate(names)
    ]
    nodes.append(helper.make_node("Add", ["p0", "p1"], ["y"]))
    vis = [
        helper.make_tensor_value_info(x, TensorProto.UINT8, [1, m, k])
        for x, k in zip(names, ks, strict=True)
    ]
    vis.append(helper.make_tensor_value_info("zx", TensorProto.UINT8, []))
    out = helper.make_tensor_value_info("y", TensorProto.INT32, None)
    consts = [numpy_helper.from_array(v, k) for k, v in inits.items()]
    g = helper.make_graph(nodes, "t", vis, [out], consts)
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 13)])


@pytest.mark.parametrize("cls", [None, "avx2"])
def test_matmul_rows_past_the_tile_equal_the_reference_on_1_and_2_threads(cls) -> None:
    """128 and 37 rows: whole tiles and a shorter last one, i32 (a run-time activation
    zero point) and u8 outputs, bit-identical across thread counts."""
    target = _target(cls) if cls else host_target()
    check(integer_ops("MatMulInteger", (1, 128, 256), (256, 96), True), target, threads=(1, 2))
    check(symmetric_matmuls(37, (80, 144), 40), target, threads=(1, 2))
    check(qmatmul(a=(37, 80), n=40, zw=True), target, threads=(1, 2))


def test_the_vnni_matmul_tile_keeps_its_accumulators_in_registers() -> None:
    """The 32-register tile is 10 x 2; its k loop (MatMulInteger, i32 out, as the
    dynamically quantised transformer's) stores and reloads nothing on the stack. The
    12 x 2 tile did: 35 zmm stack accesses in the loop, 1.07 against 0.95 ms for the
    transformer on znver4."""
    assert matmul_tile(128, 256, 16, 32) == (10, 2)
    target = codegen_target(CLASSES["avx512_vnni"])
    m = symmetric_matmuls()
    compiled = plan(optimize(import_onnx(m, {}), "O0")[0])
    _, layout = pack_weights({k: c.data for k, c in compiled.graph.constants.items()})
    code = generate(compiled, layout, target)
    asm = target.target_machine().emit_assembly(llvm.parse_assembly(code.generated.ir_text))
    start = re.search(r"\nguard\.qukr\.avx512_vnni\.10x2v16\.matmul[\w.]*:\n", asm).start()
    fn = asm[start : asm.index(".Lfunc_end", start)]
    loop = max(re.split(r"\n(?=\.LBB)", fn), key=lambda blk: blk.count("vpdpbusd"))
    label = loop.split(":", 1)[0]
    loop = loop[: re.search(r"\n\s*j\w+\s+" + re.escape(label) + r"\n", loop).end()]
    assert loop.count("vpdpbusd") >= 20
    assert "(%rsp)" not in loop, loop
