"""sink_casts: a chain cut right after a DequantizeLinear's Cast (fuse_elementwise's
step cap falls there in PP-OCRv4 det's requantise chains) ends at the byte and its reader
widens it. The structure, the graph before and after equal bit for bit in the reference
interpreter, the native code equal to the reference bit for bit on the host's class and
the two x86 classes at 1 and 2 threads (the int32 chain's tail after its first
QuantizeLinear a byte table where the target has VBMI), and the cases that must not
fire."""

from __future__ import annotations

import numpy as np
import pytest
from onnx import TensorProto, helper, numpy_helper

from guard.compiler import import_onnx, run_reference
from guard.compiler.codegen import split
from guard.compiler.codegen.build import host_target, jit
from guard.compiler.partition.plan import plan
from guard.compiler.passes.fuse_elementwise import FuseElementwise
from guard.compiler.passes.lower_qdq import LowerQdq
from guard.compiler.passes.sink_casts import SinkCasts

from ._helpers import apply
from .codegen._jit import TARGETS, skip_unless_runnable

SHAPE = [1, 8, 6, 20]
CUT = 18  # fuse_elementwise's max_steps: the first chain's 18 steps end Cast(u8), Cast(f32)


def chain_model(twice: bool = False):
    """acc (int32) -> Cast -> Mul(s) -> Add(b per channel) -> Q -> DQ -> Mul(k) -> Q -> DQ
    -> Relu -> y; twice: Mul(a, a + 3) -> y instead of the Relu (two readers of a, as a
    decomposed HardSwish has)."""
    rng = np.random.default_rng(3)
    c = SHAPE[1]
    inits = [
        numpy_helper.from_array(np.float32(0.0013), "s"),
        numpy_helper.from_array(rng.uniform(-1, 1, (1, c, 1, 1)).astype(np.float32), "b"),
        numpy_helper.from_array(np.float32(1.3), "k"),
    ]
    for name, s, z in (("q1", 0.05, 110), ("q2", 0.06, 97)):
        inits += [numpy_helper.from_array(np.float32(s), f"{name}_s"),
                  numpy_helper.from_array(np.uint8(z), f"{name}_z")]  # fmt: skip

    def qdq(src: str, name: str) -> list:
        return [helper.make_node("QuantizeLinear", [src, f"{name}_s", f"{name}_z"], [f"{name}_q"]),
                helper.make_node("DequantizeLinear", [f"{name}_q", f"{name}_s", f"{name}_z"],
                                 [f"{name}_d"])]  # fmt: skip

    nodes = [
        helper.make_node("Cast", ["acc"], ["f"], to=TensorProto.FLOAT),
        helper.make_node("Mul", ["f", "s"], ["t0"]),
        helper.make_node("Add", ["t0", "b"], ["t1"]),
        *qdq("t1", "q1"),
        helper.make_node("Mul", ["q1_d", "k"], ["t2"]),
        *qdq("t2", "q2"),
    ]
    if twice:
        inits.append(numpy_helper.from_array(np.float32(3), "three"))
        nodes += [helper.make_node("Add", ["q2_d", "three"], ["t3"]),
                  helper.make_node("Mul", ["q2_d", "t3"], ["y"])]  # fmt: skip
    else:
        nodes.append(helper.make_node("Relu", ["q2_d"], ["y"]))
    outs = [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)]
    g = helper.make_graph(
        nodes, "chain", [helper.make_tensor_value_info("acc", TensorProto.INT32, SHAPE)], outs,
        inits,
    )  # fmt: skip
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])


def _feeds(seed: int) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(seed)
    return {"acc": rng.integers(-60000, 60000, SHAPE).astype(np.int32)}


def _cut(m, steps: int = CUT):
    g = import_onnx(m)
    for p in (LowerQdq(), FuseElementwise(max_steps=steps)):
        g, _ = apply(p, g)
    return g


def test_the_chain_ends_at_the_byte_and_its_reader_widens_it():
    g0 = _cut(chain_model())
    first, second = (n for n in g0.nodes if n.op == "FusedElementwise")
    assert [s["op"] for s in first.attrs["program"][-2:]] == ["Cast", "Cast"]
    assert g0.values[first.outputs[0]].dtype == np.float32
    g, res = apply(SinkCasts(), g0)
    assert res.stats["num_sunk"] == 1
    first, second = (n for n in g.nodes if n.op == "FusedElementwise")
    assert g.values[first.outputs[0]].dtype == np.uint8
    assert first.attrs["program"][-1]["attrs"]["to"] == "u8"
    head = second.attrs["program"][0]
    assert head["op"] == "Cast" and head["attrs"]["to"] == "f32"
    assert second.inputs[head["args"][0]] == first.outputs[0]
    for seed in (0, 1, 2):  # the same steps on the same values
        np.testing.assert_array_equal(
            run_reference(g0, _feeds(seed))["y"], run_reference(g, _feeds(seed))["y"]
        )


def test_a_whole_dequantize_moves_to_a_reader_that_reads_it_twice():
    """The producer ends Cast, Sub, Mul (its chain cut at a value two ops read): the
    reader takes the three steps and reads the byte."""
    g0 = _cut(chain_model(twice=True), steps=64)
    first, second = (n for n in g0.nodes if n.op == "FusedElementwise")
    assert [s["op"] for s in first.attrs["program"][-3:]] == ["Cast", "Sub", "Mul"]
    g, res = apply(SinkCasts(), g0)
    assert res.stats["num_sunk"] == 1
    first, second = (n for n in g.nodes if n.op == "FusedElementwise")
    assert g.values[first.outputs[0]].dtype == np.uint8
    prog = second.attrs["program"]
    assert [s["op"] for s in prog] == ["Cast", "Sub", "Mul", "Add", "Mul"]
    assert prog[3]["args"][0] == "s2" and prog[4]["args"] == ["s2", "s3"]
    for seed in (0, 1, 2):
        np.testing.assert_array_equal(
            run_reference(g0, _feeds(seed))["y"], run_reference(g, _feeds(seed))["y"]
        )


def test_a_tail_reading_a_run_time_input_stays():
    """After the byte Cast the producer adds a run-time tensor: no reader could take it."""
    g0 = _cut(chain_model())
    first = next(n for n in g0.nodes if n.op == "FusedElementwise")
    prog = list(first.attrs["program"])
    prog.append({"op": "Add", "args": [f"s{len(prog) - 1}", 0], "attrs": {}})
    first.attrs["program"] = prog
    assert not g0.is_constant(first.inputs[0])  # the run-time int32 accumulator
    g, res = apply(SinkCasts(), g0)
    assert res.stats["num_sunk"] == 0


@pytest.mark.parametrize("case", ["graph output", "reader outside a chain"])
def test_the_cast_stays_when_the_float_is_seen(case):
    g0 = _cut(chain_model())
    v = next(n for n in g0.nodes if n.op == "FusedElementwise").outputs[0]
    if case == "graph output":
        g0.outputs.append(v)
    else:
        g0.add_node("Neg", [v], [(g0.values[v].shape, np.float32)], {}, name="neg")
    g, res = apply(SinkCasts(), g0)
    assert res.stats["num_sunk"] == 0 and g.values[v].dtype == np.float32


@pytest.mark.parametrize("isa", ["host", *TARGETS])
@pytest.mark.parametrize("twice", [False, True])
def test_native_and_bit_identical(isa, twice, monkeypatch):
    target = host_target() if isa == "host" else skip_unless_runnable(isa)
    monkeypatch.setattr(split, "MIN_TASK_FLOPS", 1)
    g, res = apply(SinkCasts(), _cut(chain_model(twice), steps=64 if twice else CUT))
    assert res.stats["num_sunk"] == 1
    compiled = plan(g)
    assert compiled.partition_report["count"] == 1
    rt1, code = jit(compiled, target, threads=1)
    rt2, _ = jit(compiled, target, threads=2, code=code)
    if target.byte_lookup == "vbmi":  # the int32 chain: its prefix, then the table
        assert any(s.attrs.get("q_lut_prefix") for s in code.plan.steps())
    for seed in (0, 1):
        ref = run_reference(g, _feeds(seed))["y"]
        np.testing.assert_array_equal(rt1.run(_feeds(seed))["y"], ref)
        np.testing.assert_array_equal(rt2.run(_feeds(seed))["y"], ref)
