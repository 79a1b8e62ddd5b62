"""concat_bytes: Q(Concat(DQ(a), DQ(b))) with a scale per input concatenates bytes (each
input quantised where it is made), equal bit for bit to the unoptimised graph (the same
float32 steps on the same values); a per-channel reader constant goes to each input as its
slice; a chain of Concats (DenseNet's block) goes to bytes link by link; native code
equals the reference on the host, x86-64-v3 and skylake-avx512 at 1 and 2 threads; a
Concat with a second reader or a reader with a run-time operand stays float."""

from __future__ import annotations

import numpy as np
import pytest
from onnx import TensorProto, helper, numpy_helper

from guard.compiler import import_onnx, optimize, run_reference
from guard.compiler.codegen.build import host_target
from guard.compiler.ir.isa_table import DEFAULT_TABLE, table_for
from guard.compiler.partition.plan import plan
from guard.compiler.passes.concat_bytes import ConcatBytes
from guard.compiler.passes.pipeline import PIPELINES

from ._helpers import assert_native_equals_reference
from .codegen._jit import TARGETS, skip_unless_runnable

F, U8 = TensorProto.FLOAT, TensorProto.UINT8
ISAS = ["host", *TARGETS]
SHAPES = {"a": [1, 3, 5, 7], "b": [1, 5, 5, 7], "e": [1, 4, 5, 7]}


def model(per_channel: bool = False, chain: bool = False, second_reader: bool = False,
          runtime_operand: bool = False):  # fmt: skip
    """a, b (u8, own scales) -> DQ -> Concat -> [per-channel affine, Relu] -> Q -> DQ -> y;
    with ``chain``, the dequantised Concat (read by a Relu, y, too) and e's DQ are
    concatenated again and that one quantised (z)."""
    rng = np.random.default_rng(5)
    c = {"sa": 0.047, "za": 90, "sb": 0.013, "zb": 3, "sy": 0.031, "zy": 128, "se": 0.02,
         "ze": 17, "sz": 0.05, "zz": 100}  # fmt: skip
    inits = [numpy_helper.from_array(np.float32(v) if k[0] == "s" else np.uint8(v), k)
             for k, v in c.items()]  # fmt: skip
    inits += [numpy_helper.from_array(rng.normal(1, 0.4, (8, 1, 1)).astype(np.float32), "g"),
              numpy_helper.from_array(rng.normal(0, 1, (1, 8, 1, 1)).astype(np.float32), "h")]  # fmt: skip
    nodes = [
        helper.make_node("DequantizeLinear", ["a", "sa", "za"], ["ad"]),
        helper.make_node("DequantizeLinear", ["b", "sb", "zb"], ["bd"]),
        helper.make_node("Concat", ["ad", "bd"], ["c"], axis=1),
    ]
    x = "c"
    if per_channel:
        nodes += [helper.make_node("Mul", ["c", "g"], ["cg"]),
                  helper.make_node("Add", ["cg", "h"], ["ch"]),
                  helper.make_node("Relu", ["ch"], ["cr"])]  # fmt: skip
        x = "cr"
    if runtime_operand:
        nodes.append(helper.make_node("Add", [x, "w"], ["cw"]))
        x = "cw"
    yd = "yd" if chain else "y"
    nodes += [helper.make_node("QuantizeLinear", [x, "sy", "zy"], ["yq"]),
              helper.make_node("DequantizeLinear", ["yq", "sy", "zy"], [yd])]  # fmt: skip
    outs = [helper.make_tensor_value_info("y", F, None)]
    ins = [helper.make_tensor_value_info(k, U8, SHAPES[k]) for k in ("a", "b")]
    if chain:
        ins.append(helper.make_tensor_value_info("e", U8, SHAPES["e"]))
        nodes += [helper.make_node("DequantizeLinear", ["e", "se", "ze"], ["ed"]),
                  helper.make_node("Relu", ["yd"], ["y"]),
                  helper.make_node("Concat", ["yd", "ed"], ["c2"], axis=1),
                  helper.make_node("QuantizeLinear", ["c2", "sz", "zz"], ["z"])]  # fmt: skip
        outs.append(helper.make_tensor_value_info("z", U8, None))
    if second_reader:
        outs.append(helper.make_tensor_value_info("c", F, None))
    if runtime_operand:
        ins.append(helper.make_tensor_value_info("w", F, [1, 8, 5, 7]))
    g = helper.make_graph(nodes, "qconcat", ins, outs, inits)
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])


def _feeds(seed: int, m) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(seed)
    names = [i.name for i in m.graph.input]
    f = {k: rng.integers(0, 256, SHAPES[k]).astype(np.uint8) for k in names if k in SHAPES}
    if "w" in names:
        f["w"] = rng.normal(0, 1, (1, 8, 5, 7)).astype(np.float32)
    return f


def _concat_dtypes(g) -> list[str]:
    return [str(g.values[n.outputs[0]].dtype) for n in g.nodes if n.op == "Concat"]


def _without_pass():
    return [e for e in PIPELINES["O2"](DEFAULT_TABLE)
            if not (isinstance(e, tuple) and isinstance(e[0], ConcatBytes))]  # fmt: skip


@pytest.mark.parametrize("kw", [{}, {"per_channel": True}, {"chain": True},
                                {"chain": True, "per_channel": True}])  # fmt: skip
def test_concat_of_requantised_inputs_runs_on_bytes_bit_for_bit(kw):
    m = model(**kw)
    g, report = optimize(import_onnx(m), "O2", verify_each=True)
    assert set(_concat_dtypes(g)) == {"uint8"}
    done = next(p for p in report.passes if p.name == "concat_bytes")
    assert done.stats["num_concats_on_bytes"] == (2 if kw.get("chain") else 1)
    g0 = import_onnx(m)
    for seed in (0, 1, 2):
        got, want = run_reference(g, _feeds(seed, m)), run_reference(g0, _feeds(seed, m))
        for k in want:
            np.testing.assert_array_equal(got[k], want[k])
    # the byte Concat is still a view: the arena shrinks against the float one
    before, _ = optimize(import_onnx(m), "O2", entries=_without_pass())
    assert set(_concat_dtypes(before)) == {"float32"}
    assert plan(g).arena_bytes < plan(before).arena_bytes


@pytest.mark.parametrize("kw", [{"second_reader": True}, {"runtime_operand": True}])
def test_a_shared_concat_or_a_reader_with_a_run_time_operand_stays_float(kw):
    m = model(**kw)
    g, report = optimize(import_onnx(m), "O2", verify_each=True)
    assert _concat_dtypes(g) == ["float32"]
    g0 = import_onnx(m)
    got, want = run_reference(g, _feeds(0, m)), run_reference(g0, _feeds(0, m))
    np.testing.assert_array_equal(got["y"], want["y"])


@pytest.mark.parametrize("isa", ISAS)
def test_byte_concat_native_and_bit_identical(isa):
    target = host_target() if isa == "host" else skip_unless_runnable(isa)
    table = None if isa == "host" else table_for(isa)
    m = model(per_channel=True, chain=True)
    g, _ = optimize(import_onnx(m), "O2", target=table, verify_each=True)
    assert set(_concat_dtypes(g)) == {"uint8"}
    assert_native_equals_reference(g, target, lambda seed: _feeds(seed, m), outputs=("y", "z"))
