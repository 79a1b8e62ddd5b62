"""move_dequantize: Concat(DQ(a), DQ(b)) with one scale and zero point, and a MaxPool,
Transpose or nearest Resize of DQ(x), with nothing quantising the result again, move the
bytes and dequantise once, equal bit for bit to the unoptimised graph; a chain of
Concats (DenseNet's block, each also read by a float op) moves link by link; native code
equals the reference on the host, x86-64-v3 and skylake-avx512 at 1 and 2 threads;
inputs with different scales stay float."""

from __future__ import annotations

import numpy as np
import pytest
from onnx import TensorProto, helper, numpy_helper

from guard.compiler import import_onnx, optimize, run_reference
from guard.compiler.codegen.build import host_target
from guard.compiler.ir.isa_table import table_for

from ._helpers import assert_native_equals_reference
from .codegen._jit import TARGETS, skip_unless_runnable

F, U8 = TensorProto.FLOAT, TensorProto.UINT8
ISAS = ["host", *TARGETS]
SHAPES = {"a": [1, 3, 6, 8], "b": [1, 5, 6, 8], "e": [1, 4, 6, 8]}


def model(sb: float = 0.047, tail: str = "chain"):
    """a, b (u8) -> DQ -> Concat c -> tail. tail "chain": Relu(c) -> y and Concat(c,
    DQ(e)) -> MaxPool -> Transpose -> nearest Resize -> Abs -> z (all float after
    the DQs: nothing quantises again)."""
    c = {"sa": 0.047, "za": 90, "sb": sb, "zb": 90, "se": 0.047, "ze": 90}
    inits = [numpy_helper.from_array(np.float32(v) if k[0] == "s" else np.uint8(v), k)
             for k, v in c.items()]  # fmt: skip
    inits += [numpy_helper.from_array(np.array([], np.float32), "roi"),
              numpy_helper.from_array(np.array([1, 1, 2, 1], np.float32), "sc")]  # fmt: skip
    nodes = [
        helper.make_node("DequantizeLinear", ["a", "sa", "za"], ["ad"]),
        helper.make_node("DequantizeLinear", ["b", "sb", "zb"], ["bd"]),
        helper.make_node("Concat", ["ad", "bd"], ["c"], axis=1),
        helper.make_node("Relu", ["c"], ["y"]),
        helper.make_node("DequantizeLinear", ["e", "se", "ze"], ["ed"]),
        helper.make_node("Concat", ["c", "ed"], ["c2"], axis=1),
        helper.make_node("MaxPool", ["c2"], ["m"], kernel_shape=[3, 3], pads=[1, 1, 1, 1]),
        helper.make_node("Transpose", ["m"], ["t"], perm=[0, 3, 2, 1]),
        helper.make_node("Resize", ["t", "roi", "sc"], ["u"], mode="nearest"),
        helper.make_node("Abs", ["u"], ["z"]),
    ]
    ins = [helper.make_tensor_value_info(k, U8, v) for k, v in SHAPES.items()]
    outs = [helper.make_tensor_value_info(k, F, None) for k in ("y", "z")]
    g = helper.make_graph(nodes, "movedq", ins, outs, inits)
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])


def _feeds(seed: int) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(seed)
    return {k: rng.integers(0, 256, v).astype(np.uint8) for k, v in SHAPES.items()}


def _dtypes(g) -> dict[str, set[str]]:
    out: dict[str, set[str]] = {}
    for n in g.nodes:
        if n.op in ("Concat", "MaxPool", "Transpose", "Resize"):
            out.setdefault(n.op, set()).add(str(g.values[n.outputs[0]].dtype))
    return out


def test_movement_ops_of_one_scale_run_on_bytes_bit_for_bit():
    m = model()
    g, report = optimize(import_onnx(m), "O2", verify_each=True)
    assert _dtypes(g) == {op: {"uint8"} for op in ("Concat", "MaxPool", "Transpose", "Resize")}
    done = next(p for p in report.passes if p.name == "move_dequantize")
    assert done.stats["num_moved"] == 5
    g0 = import_onnx(m)
    for seed in (0, 1, 2):
        got, want = run_reference(g, _feeds(seed)), run_reference(g0, _feeds(seed))
        for k in ("y", "z"):
            np.testing.assert_array_equal(got[k], want[k])


def test_a_concat_of_two_scales_stays_float():
    g, report = optimize(import_onnx(model(sb=0.05)), "O2", verify_each=True)
    assert _dtypes(g)["Concat"] == {"float32"}
    done = next(p for p in report.passes if p.name == "move_dequantize")
    assert any("other parameters" in n for n in done.notes)
    g0 = import_onnx(model(sb=0.05))
    for k in ("y", "z"):
        np.testing.assert_array_equal(
            run_reference(g, _feeds(0))[k], run_reference(g0, _feeds(0))[k]
        )


@pytest.mark.parametrize("isa", ISAS)
def test_moved_bytes_native_and_bit_identical(isa):
    target = host_target() if isa == "host" else skip_unless_runnable(isa)
    table = None if isa == "host" else table_for(isa)
    g, _ = optimize(import_onnx(model()), "O2", target=table, verify_each=True)
    assert _dtypes(g)["Concat"] == {"uint8"}
    assert_native_equals_reference(g, target, _feeds, outputs=("y", "z"))
