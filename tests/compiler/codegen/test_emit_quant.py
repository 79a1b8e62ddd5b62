"""QuantizeLinear / DequantizeLinear in generated code: bit-identical to the reference
interpreter, per tensor and per axis, u8/s8 (and s32 dequantisation), with ties (half to
even), saturation and infinities; what has no code is declined with the reason."""

from __future__ import annotations

import re

import numpy as np
import pytest
from onnx import TensorProto, helper

from .test_emit_ops import ISAS, check, declines, graph_model

U8, I8, I32, I16 = TensorProto.UINT8, TensorProto.INT8, TensorProto.INT32, TensorProto.INT16
F = TensorProto.FLOAT


def _qdq(q_elem: int, axis_len: int = 0, axis: int = 1, zp: bool = True):
    """x -> QuantizeLinear -> q (an output) -> DequantizeLinear -> y (an output)."""
    n = max(axis_len, 1)
    rng = np.random.default_rng(3)
    scale = rng.uniform(0.01, 0.2, n).astype(np.float32)
    lo, hi = (0, 255) if q_elem == U8 else (-128, 127)
    dt = np.uint8 if q_elem == U8 else np.int8
    zpv = rng.integers(lo, hi + 1, n).astype(dt)
    if not axis_len:
        scale, zpv = scale.reshape(()), zpv.reshape(())
    inits = [("s", scale)] + ([("z", zpv)] if zp else [])
    ins = ["x", "s", "z"] if zp else ["x", "s"]
    attrs = {"axis": axis} if axis_len else {}
    nodes = [
        helper.make_node("QuantizeLinear", ins, ["q"], **attrs),
        helper.make_node("DequantizeLinear", ["q", *ins[1:]], ["y"], **attrs),
    ]
    m = graph_model(nodes, [("x", [2, 5, 3, 4])], ["q", "y"], inits, opset=13)
    m.graph.output[0].type.tensor_type.elem_type = q_elem if zp else U8
    return m, scale


def _feeds(scale: np.ndarray, seed: int) -> dict[str, np.ndarray]:
    """Normal values, exact ties (k + 0.5) * scale, saturating values and infinities."""
    rng = np.random.default_rng(seed)
    x = (rng.standard_normal((2, 5, 3, 4)) * 4).astype(np.float32)
    s = float(np.asarray(scale).reshape(-1)[0])
    x.reshape(-1)[:24] = (np.arange(-12, 12) + 0.5).astype(np.float32) * np.float32(s)
    x.reshape(-1)[24:28] = [1e6, -1e6, np.inf, -np.inf]
    return {"x": x}


@pytest.mark.parametrize("isa", ISAS)
@pytest.mark.parametrize("elem", [U8, I8])
@pytest.mark.parametrize("axis_len,axis", [(0, 1), (5, 1), (2, 0), (4, 3)])
def test_quantize_dequantize_bit_identical(elem, axis_len, axis, isa):
    m, scale = _qdq(elem, axis_len, axis)
    compiled, _ = check(m, isa, feeds=_feeds(scale, 0))
    assert {n.op for n in compiled.graph.nodes} == {"QuantizeLinear", "DequantizeLinear"}
    check(m, isa, feeds=_feeds(scale, 1))


@pytest.mark.parametrize("isa", ISAS)
def test_quantize_without_zero_point_is_uint8(isa):
    m, scale = _qdq(U8, zp=False)
    check(m, isa, feeds=_feeds(scale, 0))


@pytest.mark.parametrize("isa", ISAS)
def test_dequantize_int32_bias_per_axis(isa):
    b = np.array([-(2**30), -7, 0, 9, 2**31 - 1], np.int32)
    s = np.array([1e-4, 2e-3, 0.5, 3.0, 1e-9], np.float32)
    node = helper.make_node("DequantizeLinear", ["b", "s"], ["y"], axis=0)
    m = graph_model([node], [("b", [5], I32)], ["y"], [("s", s)], opset=13)
    check(m, isa, feeds={"b": b})


def test_declines_int16_blocked_and_float16_scales_with_the_reason():
    s = np.float32(0.1)
    q16 = helper.make_node("DequantizeLinear", ["x", "s", "z"], ["y"])
    m = graph_model([q16], [("x", [4], I16)], ["y"], [("s", s), ("z", np.int16(0))], opset=21)
    assert any("from int16 runs on the cpu partition" in d for d in declines(m))
    blk = helper.make_node("DequantizeLinear", ["x", "s"], ["y"], axis=0, block_size=2)
    m = graph_model(
        [blk], [("x", [4, 2], U8)], ["y"], [("s", np.full((2, 2), 0.1, np.float32))], opset=21
    )
    assert any("block quantisation (block_size=2)" in d for d in declines(m))
    h = helper.make_node("DequantizeLinear", ["x", "s"], ["y"])
    m = graph_model([h], [("x", [4], U8)], ["y"], [("s", np.float16(0.1))], opset=19)
    m.graph.output[0].type.tensor_type.elem_type = TensorProto.FLOAT16
    assert any("float16 scale" in d for d in declines(m))


@pytest.mark.parametrize("isa", ISAS)
@pytest.mark.parametrize("elem", [U8, I8])
def test_max_pools_on_quantized_tensors(elem, isa):
    """Padded windows (a pad never wins: the type's lowest value starts the maximum)."""
    nodes = [
        helper.make_node(
            "MaxPool", ["x"], ["p"], kernel_shape=[3, 3], strides=[2, 2], pads=[1, 1, 1, 1]
        ),
        helper.make_node("GlobalMaxPool", ["x"], ["g"]),
    ]
    m = graph_model(nodes, [("x", [1, 3, 7, 6], elem)], ["p", "g"], out_type=elem)
    lo, hi = (0, 256) if elem == U8 else (-128, 128)
    x = np.random.default_rng(0).integers(lo, hi, (1, 3, 7, 6))
    x[0, 1] = lo  # a channel at the lowest value everywhere
    check(m, isa, feeds={"x": x.astype(np.uint8 if elem == U8 else np.int8)})


@pytest.mark.parametrize("isa", ISAS)
@pytest.mark.parametrize("elem", [U8, I8])
@pytest.mark.parametrize(
    "w,attrs",
    [
        (140, dict(kernel_shape=[3, 3], strides=[2, 2], pads=[1, 1, 1, 1])),
        (100, dict(kernel_shape=[3, 3], strides=[1, 1], pads=[1, 1, 1, 1])),
        (40, dict(kernel_shape=[3, 3], strides=[2, 2], ceil_mode=1)),
        (37, dict(kernel_shape=[2, 2], strides=[2, 2], dilations=[2, 1])),
    ],
)
def test_max_pools_on_wide_quantized_rows(elem, isa, w, attrs):
    """Rows of several vectors: the interior ones in a loop, the borders and a short
    last vector masked; ceil_mode windows past the edge, dilated rows."""
    m = graph_model([helper.make_node("MaxPool", ["x"], ["p"], **attrs)],
                    [("x", [1, 3, 9, w], elem)], ["p"], out_type=elem)  # fmt: skip
    lo, hi = (0, 256) if elem == U8 else (-128, 128)
    x = np.random.default_rng(1).integers(lo, hi, (1, 3, 9, w))
    x[0, 2] = lo
    check(m, isa, feeds={"x": x.astype(np.uint8 if elem == U8 else np.int8)})


def _chain(c: int, hw: tuple[int, int], elem: int, per_channel: bool = True, residual=False):
    """MaxPool -> DequantizeLinear -> Mul, Add (per channel or scalars) -> QuantizeLinear,
    twice over (as a QDQ model's BatchNormalization between requantisations), or with
    ``residual`` a second input, DequantizeLinear'd, added in (two run-time inputs)."""
    dt = np.uint8 if elem == U8 else np.int8
    shape = (c, 1, 1) if per_channel else ()
    inits = [("s", np.float32(0.05)), ("z", np.array(120 if elem == U8 else -3, dt)),
             ("g", np.linspace(0.5, 2, c).astype(np.float32).reshape(shape) if per_channel
              else np.float32(1.3)),
             ("bb", np.linspace(-1, 1, c).astype(np.float32).reshape(shape) if per_channel
              else np.float32(-0.4)),
             ("s2", np.float32(0.07)), ("z2", np.array(100 if elem == U8 else 5, dt))]  # fmt: skip
    nodes = [
        helper.make_node("MaxPool", ["x"], ["p"], kernel_shape=[2, 2], strides=[1, 1]),
        helper.make_node("DequantizeLinear", ["p", "s", "z"], ["d"]),
        helper.make_node("Mul", ["d", "g"], ["m"]),
        helper.make_node("Add", ["m", "bb"], ["a"]),
        helper.make_node("QuantizeLinear", ["a", "s2", "z2"], ["q"]),
        helper.make_node("DequantizeLinear", ["q", "s2", "z2"], ["d2"]),
    ]
    if residual:
        nodes += [
            helper.make_node("DequantizeLinear", ["x2", "s", "z"], ["e"]),
            helper.make_node("Add", ["d2", "e"], ["m2"]),
        ]
    else:
        nodes.append(helper.make_node("Mul", ["d2", "g"], ["m2"]))
    nodes += [
        helper.make_node("QuantizeLinear", ["m2", "s", "z"], ["q2"]),
        helper.make_node("MaxPool", ["q2"], ["y"], kernel_shape=[2, 2], strides=[1, 1]),
    ]
    xs = [("x", [1, c, *hw], elem)] + ([("x2", [1, c, hw[0] - 1, hw[1] - 1], elem)] * residual)
    return graph_model(nodes, xs, ["y"], inits, opset=13, out_type=elem)


@pytest.mark.parametrize("isa", ISAS)
def test_a_requantise_chain_in_place_runs_in_vectors(isa):
    """A chain of two run-time u8 inputs (a residual Add between requantisations) fused
    and written over an input: an in-place path whose vector loop no overlap check
    guards (LLVM's run-time check sent every in-place chain to the scalar loop: 64% of
    QDQ ShuffleNet's time), and the bytes equal the reference's."""
    _, code = check(_chain(5, (12, 40), U8, residual=True), isa, pipeline="O2", seeds=(0, 1))
    chains = [s for s in code.plan.steps() if s.op == "FusedElementwise" and s.may_alias]
    assert chains, "no chain was planned in place"
    chain = chains[-1]
    assert "q_lut" not in chain.attrs and sum(o.space == "arena" for o in chain.inputs) == 2
    body = re.search(rf"^define [^\n]*@{chain.kernel}\(.*?^}}", code.generated.ir_text,
                     re.M | re.S)  # fmt: skip
    # In byte vectors (quant/byte_lanes.py: each vector read before it is written, no
    # overlap check), or written through the input's pointer when the two are one (the
    # typed path; LLVM keeps the compare): no run-time overlap check stands between the
    # chain and its vector loop.
    assert body and re.search(r"load <\d+ x i8>|icmp eq ptr", body.group(0)), "no in-place path"
    assert re.search(r"fdiv <\d+ x float>", body.group(0)), "no vector loop"


LUT_ISAS = [*ISAS, "host"]  # AVX2 and AVX-512 without VBMI keep the float chain


def _every_byte(m, elem: int, seed: int) -> dict[str, np.ndarray]:
    """Random bytes of the whole range, every value 0..255 in each channel's first 256."""
    dt = np.uint8 if elem == U8 else np.int8
    rng = np.random.default_rng(seed)
    shape = [d.dim_value for d in m.graph.input[0].type.tensor_type.shape.dim]
    x = rng.integers(0, 256, shape).astype(np.uint8)
    flat = x.reshape(shape[0] * shape[1], -1)
    n = min(256, flat.shape[1])
    flat[:, :n] = rng.permutation(256)[:n]
    return {"x": x.view(dt)}


def _table_check(m, isa: str, elem: int):
    """Compile ``m`` at O2 for ``isa`` and compare with the reference at 1 and 2 threads,
    bit for bit, on two inputs of every byte; the code (its plan) is returned."""
    from guard.compiler import import_onnx, optimize, run_reference
    from guard.compiler.codegen.build import host_target, jit
    from guard.compiler.ir.isa_table import table_for as isa_row
    from guard.compiler.partition.plan import plan

    from ._jit import skip_unless_runnable

    target = host_target() if isa == "host" else skip_unless_runnable(isa)
    g0 = import_onnx(m, {})
    g, _ = optimize(g0, "O2", target=isa_row(target.isa))
    compiled = plan(g)
    assert compiled.partition_report["fallback_nodes"] == 0
    rt, code = jit(compiled, target, threads=1)
    rt2, _ = jit(compiled, target, threads=2, code=code)
    for seed in (0, 1):
        f = _every_byte(m, elem, seed)
        ref = run_reference(g0, f)["y"]
        for r in (rt, rt2):
            out = r.run(f)["y"]
            assert out.dtype == ref.dtype
            np.testing.assert_array_equal(out, ref)
    return code


@pytest.mark.parametrize("isa", LUT_ISAS)
@pytest.mark.parametrize("elem", [U8, I8])
@pytest.mark.parametrize("per_channel", [True, False])
def test_a_byte_chain_of_constants_is_a_table(isa, elem, per_channel):
    """Requantise, BatchNormalization, requantise on u8/s8 with per-channel (or scalar)
    constants: on a VBMI target one table lookup an element (quant/lut.py; the table is
    the reference's result for every byte, 64 bytes a vpermi2b pair), elsewhere the float
    chain; bit-identical at 1 and 2 threads, 64 channels of 90 x 90 (126 vectors and a
    36-byte tail a channel) cut by channels into tasks."""
    code = _table_check(_chain(64, (91, 91), elem, per_channel), isa, elem)
    (chain,) = [s for s in code.plan.steps() if s.op == "FusedElementwise"]
    if code.target.byte_lookup != "vbmi":
        assert "q_lut" not in chain.attrs
        return
    assert chain.attrs["q_lut"] == (64 if per_channel else 0)
    body = re.search(rf"^define [^\n]*@{chain.parts[0].kernel if chain.parts else chain.kernel}"
                     rf"\(.*?^}}", code.generated.ir_text, re.M | re.S)  # fmt: skip
    assert body and "vpermi2var.qi.512" in body.group(0) and "float" not in body.group(0)
    if per_channel:
        assert len(chain.parts) >= 2, "the step was not split"
        t0, t1 = ([o for o in t.inputs if o is not None and o.space == "packed"][0]
                  for t in chain.parts[:2])  # fmt: skip
        first = chain.parts[1].outputs[0].offset - chain.parts[0].outputs[0].offset
        plane = int(np.prod(chain.outputs[0].shape[2:]))  # bytes of a channel
        assert t1.offset - t0.offset == first // plane * 256  # task 1's first channel's table


@pytest.mark.parametrize("isa", LUT_ISAS)
@pytest.mark.parametrize("elem", [U8, I8])
def test_a_short_table_chain_and_two_chains_sharing_a_constant(isa, elem):
    """Chains of 5 channels of 11 x 39 (a masked vector a channel; the scalar table one
    run of 33 vectors and a tail), and two chains of one shape and program reading one
    per-channel constant with other scales: each gets its own table (the packed block is
    keyed by its bytes, not by the constant it rides on)."""
    _table_check(_chain(5, (12, 40), elem, per_channel=True), isa, elem)
    _table_check(_chain(5, (12, 40), elem, per_channel=False), isa, elem)
    dt = np.uint8 if elem == U8 else np.int8
    c = 6
    g = np.linspace(0.5, 2, c).astype(np.float32).reshape(c, 1, 1)
    inits = [("s", np.float32(0.05)), ("z", np.array(7, dt)), ("g", g),
             ("s2", np.float32(0.11)), ("z2", np.array(-2 if elem == I8 else 30, dt))]  # fmt: skip
    pool = {"kernel_shape": [3, 3], "pads": [1, 1, 1, 1]}  # shapes kept: one kernel key
    nodes = [
        helper.make_node("MaxPool", ["x"], ["p"], **pool),
        helper.make_node("DequantizeLinear", ["p", "s", "z"], ["d"]),
        helper.make_node("Mul", ["d", "g"], ["m"]),
        helper.make_node("QuantizeLinear", ["m", "s2", "z2"], ["q"]),
        helper.make_node("MaxPool", ["q"], ["p2"], **pool),
        helper.make_node("DequantizeLinear", ["p2", "s2", "z2"], ["d2"]),
        helper.make_node("Mul", ["d2", "g"], ["m2"]),
        helper.make_node("QuantizeLinear", ["m2", "s", "z"], ["y"]),
    ]
    m = graph_model(nodes, [("x", [1, c, 10, 21], elem)], ["y"], inits, opset=13, out_type=elem)
    code = _table_check(m, isa, elem)
    if code.target.byte_lookup == "vbmi":
        tables = {o.offset for s in code.plan.steps() if "q_lut" in s.attrs
                  for o in s.inputs if o is not None and o.space == "packed"}  # fmt: skip
        assert len(tables) == 2


@pytest.mark.parametrize("isa", LUT_ISAS)
@pytest.mark.parametrize("elem", [U8, I8])
@pytest.mark.parametrize("suffix", ["per-channel", "scalar", "shares the prefix's"])
def test_a_float_chain_quantises_once_then_looks_up(isa, elem, suffix):
    """BatchNormalization on a float tensor (a Concat of dequantised layers) -> Quantize ->
    Dequantize -> Mul -> Quantize, as DenseNet's: on a VBMI target the float code runs to
    the first QuantizeLinear only and the rest is the per-channel table of that byte
    (one division an element, not two); bit-identical at 1 and 2 threads, with ties,
    saturating values and infinities, the tail's constant on its own or read by both."""
    dt = np.uint8 if elem == U8 else np.int8
    c, hw = 24, (9, 70)
    g = np.linspace(0.5, 2, c).astype(np.float32).reshape(c, 1, 1)
    g2 = {"per-channel": np.linspace(1.7, 0.3, c).astype(np.float32).reshape(c, 1, 1),
          "scalar": np.float32(0.8), "shares the prefix's": g}[suffix]  # fmt: skip
    inits = [("g", g), ("bb", np.linspace(-1, 1, c).astype(np.float32).reshape(c, 1, 1)),
             ("s2", np.float32(0.07)), ("z2", np.array(100 if elem == U8 else 5, dt)),
             ("s", np.float32(0.05)), ("z", np.array(120 if elem == U8 else -3, dt))]  # fmt: skip
    if suffix != "shares the prefix's":
        inits.append(("g2", g2))
    nodes = [
        helper.make_node("Mul", ["x", "g"], ["m"]),
        helper.make_node("Add", ["m", "bb"], ["a"]),
        helper.make_node("QuantizeLinear", ["a", "s2", "z2"], ["q"]),
        helper.make_node("DequantizeLinear", ["q", "s2", "z2"], ["d"]),
        helper.make_node("Mul", ["d", "g2" if suffix != "shares the prefix's" else "g"], ["m2"]),
        helper.make_node("QuantizeLinear", ["m2", "s", "z"], ["y"]),
    ]
    m = graph_model(nodes, [("x", [1, c, *hw])], ["y"], inits, opset=13, out_type=elem)
    from guard.compiler import import_onnx, optimize, run_reference
    from guard.compiler.codegen.build import host_target, jit
    from guard.compiler.partition.plan import plan

    from ._jit import skip_unless_runnable

    target = host_target() if isa == "host" else skip_unless_runnable(isa)
    g0 = import_onnx(m, {})
    compiled = plan(optimize(g0, "O2")[0])
    rt, code = jit(compiled, target, 1)
    rt2, _ = jit(compiled, target, 2, code=code)
    for seed in (0, 1):
        x = (np.random.default_rng(seed).standard_normal((1, c, *hw)) * 6).astype(np.float32)
        x.reshape(-1)[:40] = (np.arange(-20, 20) + 0.5).astype(np.float32) * np.float32(0.07)
        x.reshape(-1)[40:44] = [1e6, -1e6, np.inf, -np.inf]
        ref = run_reference(g0, {"x": x})["y"]
        for r in (rt, rt2):
            np.testing.assert_array_equal(r.run({"x": x})["y"], ref)
    (chain,) = [s for s in code.plan.steps() if s.op == "FusedElementwise"]
    assert ("q_lut_prefix" in chain.attrs) == (target.byte_lookup == "vbmi")
    if target.byte_lookup == "vbmi":
        assert chain.attrs["q_lut"] == (0 if suffix == "scalar" else c)
        kernel = chain.parts[0].kernel if chain.parts else chain.kernel
        body = re.search(rf"^define [^\n]*@{kernel}\(.*?^}}", code.generated.ir_text,
                         re.M | re.S)  # fmt: skip
        assert body and "vpermi2var.qi.512" in body.group(0)
        prefix = chain.attrs["program"][: chain.attrs["q_lut_prefix"]]
        assert [p["op"] for p in prefix].count("Div") == 1


def test_byte_lookups_are_llvms_answer_and_an_artefact_needing_them_refuses_without():
    """VBMI is what LLVM lowers a 64-byte two-source shuffle to (vpermt2b), never a CPU
    name; code built with the tables (icelake-server) refuses a host with the same int8
    dot product but no VBMI (cascadelake), with the reason, and not the other way round."""
    from guard.compiler.codegen.llvm_target import codegen_target, runnable_here

    def t(cpu: str, attrs: str = ""):
        return codegen_target(f"llvm -mtriple=x86_64-linux-gnu -mcpu={cpu}{attrs}")

    assert [t(c).byte_lookup for c in ("x86-64-v3", "skylake-avx512", "icelake-server")] == [
        "none", "none", "vbmi"]  # fmt: skip
    assert t("znver4", " -mattr=-avx512vbmi").byte_lookup == "none"
    why = runnable_here(t("icelake-server"), t("cascadelake"))
    assert why and "avx512vbmi" in why
    assert runnable_here(t("cascadelake"), t("icelake-server")) is None


def test_partition_report_counts_quant_conversions_like_relayouts():
    """x -> Q -> DQ -> Relu -> Q -> DQ: four conversions on activations, two Q->DQ pairs;
    the constant weight's DequantizeLinear is not one (folded at compile time)."""
    from guard.compiler import import_onnx, optimize
    from guard.compiler.partition.assign import format_report
    from guard.compiler.partition.plan import plan

    s, z = np.float32(0.1), np.uint8(9)
    nodes = [
        helper.make_node("QuantizeLinear", ["x", "s", "z"], ["q"]),
        helper.make_node("DequantizeLinear", ["q", "s", "z"], ["d"]),
        helper.make_node("DequantizeLinear", ["wq", "s", "z"], ["w"]),
        helper.make_node("Add", ["d", "w"], ["a"]),
        helper.make_node("Relu", ["a"], ["r"]),
        helper.make_node("QuantizeLinear", ["r", "s", "z"], ["q2"]),
        helper.make_node("DequantizeLinear", ["q2", "s", "z"], ["y"]),
    ]
    inits = [("s", s), ("z", z), ("wq", np.arange(4, dtype=np.uint8))]
    m = graph_model(nodes, [("x", [4])], ["y"], inits, opset=13)
    g, _ = optimize(import_onnx(m, {}), "O0")
    rep = plan(g).partition_report
    assert rep["quant_conversions"] == {"nodes": 4, "pairs": 2, "fused": 0} and rep["count"] == 1
    assert "quant conversions: 4 QuantizeLinear/DequantizeLinear" in format_report(dict(rep))


@pytest.mark.parametrize(
    "elem,name", [(TensorProto.INT4, "int4"), (TensorProto.FLOAT8E4M3FN, "float8_e4m3fn")]
)
def test_int4_and_float8_dequantize_land_on_the_cpu_partition_with_the_reason(elem, name):
    from guard.compiler import import_onnx, optimize, run_reference
    from guard.compiler.partition.plan import plan

    node = helper.make_node("DequantizeLinear", ["x", "s"], ["y"])
    m = graph_model([node], [("x", [4], elem)], ["y"], [("s", np.float32(0.5))], opset=21)
    assert any(f"from {name} runs on the cpu partition" in d for d in declines(m))
    g, _ = optimize(import_onnx(m, {}), "O2")
    rep = plan(g).partition_report
    assert [p["backend"] for p in rep["partitions"]] == ["cpu"]
    x = np.array([1, -2, 3, 0]).astype(g.values["x"].dtype)
    np.testing.assert_array_equal(run_reference(g, {"x": x})["y"], x.astype(np.float32) * 0.5)
