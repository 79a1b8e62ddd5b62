"""The int8 kernels (QLinearConv, ConvInteger, QLinearMatMul, MatMulInteger) equal the
reference interpreter bit for bit on every integer dot-product capability this host can
run (VNNI, AVX-512 without VNNI, AVX2's exact vpmaddwd path, portable SSE2 code), at 1
and 2 threads; the capability is LLVM's answer for the target's features, pinned in the
manifest and checked before an artefact runs."""

from __future__ import annotations

import re

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from guard.compiler import import_onnx, optimize, run_reference
from guard.compiler.codegen.build import jit
from guard.compiler.codegen.llvm_target import (
    CodegenTarget,
    codegen_target,
    host_target,
    int_dot_class,
    runnable_here,
)
from guard.compiler.partition.plan import plan
from guard.compiler.reference.quant import multiplier, requantize

# One target per capability class; each test skips the classes this host cannot run.
CLASSES = {
    "avx512_vnni": "llvm -mtriple=x86_64-linux-gnu -mcpu=znver4",
    "avx512bw": "llvm -mtriple=x86_64-linux-gnu -mcpu=x86-64-v4",
    "avx2": "llvm -mtriple=x86_64-linux-gnu -mcpu=x86-64-v3",
    "none": "llvm -mtriple=x86_64-linux-gnu -mcpu=x86-64",
}
ET = {np.uint8: TensorProto.UINT8, np.int8: TensorProto.INT8}


def _target(cls: str) -> CodegenTarget:
    t = codegen_target(CLASSES[cls])
    assert t.int_dot == cls
    why = runnable_here(t)
    if why:
        pytest.skip(f"{cls} code does not run here: {why}")
    return t


def _model(
    node: onnx.NodeProto, x: tuple, xdt, ydt, inits: dict, extra_inputs=()
) -> onnx.ModelProto:
    vis = [helper.make_tensor_value_info("x", ET[xdt], list(x))]
    vis += [helper.make_tensor_value_info(n, t, s) for n, t, s in extra_inputs]
    out = helper.make_tensor_value_info("y", ET.get(ydt, TensorProto.INT32), None)
    g = helper.make_graph(
        [node],
        "t",
        vis,
        [out],
        [numpy_helper.from_array(np.asarray(v), k) for k, v in inits.items()],
    )
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 13)])


def _weights(rng, shape, wdt):
    lo, hi = (-128, 128) if wdt == np.int8 else (0, 256)
    return rng.integers(lo, hi, shape).astype(wdt)


def qconv(x, w, pads, strides, group=1, xdt=np.uint8, wdt=np.int8, zw=False, seed=0):
    rng = np.random.default_rng(seed)
    k = w[0]
    zwv = np.zeros(k, wdt)
    if zw:
        zwv = (rng.integers(-3, 4, k) if wdt == np.int8 else rng.integers(120, 136, k)).astype(wdt)
    inits = {
        "sx": np.float32(0.02), "zx": np.array(100 if xdt == np.uint8 else -7, xdt),
        "w": _weights(rng, w, wdt), "sw": rng.uniform(0.001, 0.01, k).astype(np.float32),
        "zw": zwv, "sy": np.float32(0.3), "zy": np.array(128 if xdt == np.uint8 else 3, xdt),
        "b": rng.integers(-3000, 3000, k).astype(np.int32),
    }  # fmt: skip
    node = helper.make_node("QLinearConv", ["x", *inits], ["y"], pads=pads, strides=strides,
                            group=group)  # fmt: skip
    return _model(node, x, xdt, xdt, inits)


def qmatmul(a, n, adt=np.uint8, wdt=np.int8, per_col=True, zw=False, seed=0):
    rng = np.random.default_rng(seed)
    zb = np.zeros(n, wdt) if per_col else np.array(0, wdt)
    if zw:
        zb = (rng.integers(-3, 4, n) if wdt == np.int8 else rng.integers(120, 136, n)).astype(wdt)
    inits = {
        "sa": np.float32(0.02), "za": np.array(100 if adt == np.uint8 else -7, adt),
        "w": _weights(rng, (a[-1], n), wdt),
        "sb": (rng.uniform(0.001, 0.01, n) if per_col else np.float32(0.004)).astype(np.float32),
        "zb": zb, "sy": np.float32(0.5), "zy": np.array(128 if adt == np.uint8 else 3, adt),
    }  # fmt: skip
    return _model(helper.make_node("QLinearMatMul", ["x", *inits], ["y"]), a, adt, adt, inits)


def integer_ops(op: str, x, w, runtime_zp: bool, seed=0):
    rng = np.random.default_rng(seed)
    inits = {"w": _weights(rng, w, np.int8)}
    extra = []
    if runtime_zp:
        extra = [("zx", TensorProto.UINT8, [])]
    else:
        inits["zx"] = np.array(117, np.uint8)
    inits["zw"] = rng.integers(-2, 3, w[0] if op == "ConvInteger" else w[1]).astype(np.int8)
    attrs = {"pads": [1, 1, 1, 1]} if op == "ConvInteger" else {}
    node = helper.make_node(op, ["x", "w", "zx", "zw"], ["y"], **attrs)
    return _model(node, x, np.uint8, np.int32, inits, extra)


def _feeds(g0, seed: int) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(seed)
    out = {}
    for k in g0.inputs:
        v = g0.values[k]
        lo, hi = (0, 256) if v.dtype == "uint8" else (-128, 128)
        out[k] = rng.integers(lo, hi, v.shape).astype(v.dtype)
    return out


def check(m: onnx.ModelProto, target: CodegenTarget, threads=(1,), seeds=(1,)):
    g0 = import_onnx(m, {})
    g, _ = optimize(g0, "O0")
    compiled = plan(g)
    assert compiled.partition_report["fallback_nodes"] == 0, dict(compiled.partitions.declines)
    outs = {}
    for n in threads:
        rt, code = jit(compiled, target, n)
        for seed in seeds:
            f = _feeds(g0, seed)
            ref = run_reference(g0, f)["y"]
            out = rt.run(f)["y"]
            assert out.dtype == ref.dtype and out.shape == ref.shape
            np.testing.assert_array_equal(out, ref)
            outs.setdefault(seed, out)
            np.testing.assert_array_equal(out, outs[seed])  # bit-identical across threads
    return code


CONVS = {
    "3x3": dict(x=(1, 8, 9, 9), w=(16, 8, 3, 3), pads=[1, 1, 1, 1], strides=[1, 1]),
    "1x1": dict(x=(1, 16, 8, 8), w=(24, 16, 1, 1), pads=[0, 0, 0, 0], strides=[1, 1]),
    "strided": dict(x=(1, 6, 11, 13), w=(20, 6, 3, 3), pads=[1, 0, 1, 2], strides=[2, 2]),
    "grouped": dict(x=(2, 12, 10, 10), w=(12, 4, 3, 3), pads=[1, 1, 1, 1], strides=[1, 1],
                    group=3),
    "depthwise": dict(x=(1, 32, 12, 12), w=(32, 1, 3, 3), pads=[1, 1, 1, 1], strides=[2, 2],
                      group=32),
    "s8": dict(x=(1, 8, 9, 9), w=(16, 8, 3, 3), pads=[1, 1, 1, 1], strides=[1, 1], xdt=np.int8),
    "zw": dict(x=(1, 8, 9, 9), w=(16, 8, 3, 3), pads=[1, 1, 1, 1], strides=[1, 1], zw=True),
    "u8w": dict(x=(1, 5, 7, 7), w=(9, 5, 3, 3), pads=[1, 1, 1, 1], strides=[1, 1],
                wdt=np.uint8, zw=True),
    "7x7/2": dict(x=(1, 3, 30, 30), w=(32, 3, 7, 7), pads=[3, 3, 3, 3], strides=[2, 2]),
    # rows of 8 pixels or fewer: 256-bit vectors on the AVX-512 classes
    "narrow": dict(x=(1, 32, 7, 7), w=(48, 32, 3, 3), pads=[1, 1, 1, 1], strides=[1, 1]),
    "narrow/2": dict(x=(1, 16, 14, 13), w=(24, 16, 3, 3), pads=[1, 1, 1, 1], strides=[2, 2],
                     zw=True),
    # rows of many panels: the interior ones in a run-time loop, the border ones unrolled
    "wide3x3": dict(x=(1, 8, 6, 100), w=(16, 8, 3, 3), pads=[1, 1, 1, 1], strides=[1, 1]),
    "wide7x7/2": dict(x=(1, 3, 64, 150), w=(32, 3, 7, 7), pads=[3, 3, 3, 3], strides=[2, 2],
                      zw=True),
}  # fmt: skip
MATMULS = {
    "tile": dict(a=(32, 64), n=48),
    "batch": dict(a=(1, 7, 30), n=19),
    "gemv": dict(a=(3, 100), n=70, adt=np.int8),
    "zw": dict(a=(20, 33), n=40, zw=True),
    "u8w": dict(a=(20, 33), n=40, wdt=np.uint8, zw=True, per_col=False),
}


@pytest.mark.parametrize("case", list(CONVS))
def test_qlinearconv_equals_the_reference_on_the_host(case: str) -> None:
    check(qconv(**CONVS[case]), host_target())


@pytest.mark.parametrize("case", list(MATMULS))
def test_qlinearmatmul_equals_the_reference_on_the_host(case: str) -> None:
    check(qmatmul(**MATMULS[case]), host_target())


@pytest.mark.parametrize("cls", ["avx2", "none"])
@pytest.mark.parametrize("case", ["3x3", "strided", "zw", "s8", "wide3x3", "wide7x7/2"])
def test_qlinearconv_is_exact_on_every_class(cls: str, case: str) -> None:
    check(qconv(**CONVS[case]), _target(cls))


@pytest.mark.parametrize("cls", ["avx2", "none"])
@pytest.mark.parametrize("case", ["tile", "gemv", "u8w"])
def test_qlinearmatmul_is_exact_on_every_class(cls: str, case: str) -> None:
    check(qmatmul(**MATMULS[case]), _target(cls))


@pytest.mark.slow
@pytest.mark.parametrize("cls", list(CLASSES))
@pytest.mark.parametrize("case", list(CONVS) + [f"mm:{k}" for k in MATMULS])
def test_every_int8_case_on_every_class(cls: str, case: str) -> None:
    m = qmatmul(**MATMULS[case[3:]]) if case.startswith("mm:") else qconv(**CONVS[case])
    check(m, _target(cls))


@pytest.mark.parametrize("op", ["ConvInteger", "MatMulInteger"])
@pytest.mark.parametrize("runtime_zp", [False, True])
def test_integer_ops_equal_the_reference(op: str, runtime_zp: bool) -> None:
    """int32 outputs, the weights' per-channel zero points compensated, the activations'
    zero point a constant or a run-time scalar (DynamicQuantizeLinear's output)."""
    shapes = ((1, 6, 9, 9), (16, 6, 3, 3)) if op == "ConvInteger" else ((2, 9, 64), (64, 33))
    for cls in ("avx2", None):
        check(integer_ops(op, *shapes, runtime_zp), _target(cls) if cls else host_target())


@pytest.mark.parametrize("cls", [None, "avx2"])
def test_split_int8_kernels_are_bit_identical_at_1_and_2_threads(cls: str | None) -> None:
    target = _target(cls) if cls else host_target()
    for m in (
        qconv(x=(1, 32, 28, 28), w=(64, 32, 3, 3), pads=[1, 1, 1, 1], strides=[1, 1]),
        qconv(x=(1, 64, 28, 28), w=(256, 64, 1, 1), pads=[0, 0, 0, 0], strides=[1, 1], zw=True),
        qmatmul(a=(1, 128, 256), n=256),
    ):
        code = check(m, target, threads=(1, 2))
        assert all(len(s.parts) >= 2 for s in code.plan.steps()), "the step was not split"


@pytest.mark.parametrize("cls", [None, "avx2"])
def test_row_band_tasks_call_one_conv_body(cls: str | None) -> None:
    """The tasks of a row-band split call one body over their rows, in a run-time loop
    over a row's interior panels (each task's kernel carried a whole copy, each panel its
    own im2col code: the AVX2 build of QDQ Inception-v2 compiled for six minutes)."""
    target = _target(cls) if cls else host_target()
    code = check(qconv(**CONVS["wide7x7/2"]), target, threads=(1, 2))
    (step,) = code.plan.steps()
    assert len(step.parts) >= 2, "the step was not split"
    bodies = re.findall(r"^define .*@(guard\.qconv\.[\w.]+)\(", code.generated.ir_text, re.M)
    assert len(bodies) == 1, bodies


def test_requantisation_matches_onnxruntime_bit_for_bit() -> None:
    ort = pytest.importorskip("onnxruntime")
    m = qconv(**CONVS["strided"])
    rng = np.random.default_rng(3)
    x = rng.integers(0, 256, (1, 6, 11, 13)).astype(np.uint8)
    sess = ort.InferenceSession(m.SerializeToString(), providers=["CPUExecutionProvider"])
    got = sess.run(None, {"x": x})[0]
    ref = run_reference(import_onnx(m, {}), {"x": x})["y"]
    np.testing.assert_array_equal(got, ref)


def test_requantize_rounds_half_to_even_and_clamps() -> None:
    mult = multiplier(np.float32(1.0), np.float32(0.5), np.float32(1.0))
    acc = np.array([1, 3, 5, -1, -3, 1000, -1000], np.int32)  # x 0.5: 0.5, 1.5, 2.5, ...
    y = requantize(acc, mult, np.array(10, np.uint8), np.dtype(np.uint8), {"qmin": 10})
    np.testing.assert_array_equal(y, [10, 12, 12, 10, 10, 255, 10])


def test_the_capability_is_llvms_answer_for_the_features() -> None:
    x86 = "x86_64-unknown-linux-gnu"
    assert int_dot_class(x86, "znver4", ()) == "avx512_vnni"
    assert int_dot_class(x86, "znver4", ("-avx512vnni",)) == "avx512bw"
    assert int_dot_class(x86, "x86-64-v3", ()) == "avx2"
    assert int_dot_class(x86, "x86-64-v3", ("+avxvnni",)) == "avx_vnni"
    assert int_dot_class(x86, "x86-64", ()) == "none"
    a64 = "aarch64-unknown-linux-gnu"
    assert int_dot_class(a64, "generic", ("+neon",)) == "neon"
    assert int_dot_class(a64, "generic", ("+dotprod", "+neon")) == "neon_dotprod"
    assert int_dot_class(a64, "generic", ("+dotprod", "+i8mm", "+neon")) == "neon_i8mm"


def test_an_artefact_built_for_a_dot_product_the_host_lacks_is_refused() -> None:
    """Decided by the host's LLVM features, not by its CPU name: a Zen 4 class host (AVX-512
    VNNI, no AVX-VNNI) refuses AVX-VNNI code and runs AVX2 code."""
    host = CodegenTarget("x86_64-unknown-linux-gnu", "znver4", ("+avx2", "+avx512bw", "+avx512f",
                                                               "+avx512vnni"))  # fmt: skip
    why = runnable_here(codegen_target("llvm -mtriple=x86_64-linux-gnu -mcpu=sierraforest"), host)
    assert why and "avx_vnni integer dot product" in why and "avxvnni" in why
    assert runnable_here(codegen_target(CLASSES["avx2"]), host) is None


def test_the_manifest_pins_the_capability() -> None:
    d = codegen_target(CLASSES["avx2"]).to_dict()
    assert d["int_dot"] == "avx2" and d["table"]["int_dot"] == "avx2"  # type: ignore[index]


def test_the_generated_code_uses_the_capabilitys_instruction() -> None:
    """FileCheck-style: VNNI code calls vpdpbusd; AVX2 code vpmaddwd and never the
    saturating vpmaddubsw."""
    vnni = (
        check(qmatmul(**MATMULS["tile"]), host_target())
        if host_target().int_dot == "avx512_vnni"
        else None
    )
    if vnni is not None:
        assert "llvm.x86.avx512.vpdpbusd.512" in vnni.generated.ir_text
    g, _ = optimize(import_onnx(qmatmul(**MATMULS["tile"]), {}), "O0")
    from guard.compiler.codegen.build import generate
    from guard.compiler.runtime.weights import pack_weights

    compiled = plan(g)
    _, layout = pack_weights({k: c.data for k, c in compiled.graph.constants.items()})
    avx2 = generate(compiled, layout, codegen_target(CLASSES["avx2"]))
    assert "llvm.x86.avx2.pmadd.wd" in avx2.generated.ir_text
    assert "pmadd.ub.sw" not in avx2.generated.ir_text


def two_convs(c0: int = 16, c1: int = 24, c2: int = 24, hw=(20, 40), seed: int = 0):
    """x -> QLinearConv 3x3 -> QLinearConv 3x3: two layers of different depth whose row
    tiles share one micro-kernel variant (so LLVM cannot specialise it to either)."""
    rng = np.random.default_rng(seed)
    inits: dict = {"sx": np.float32(0.02), "zx": np.array(100, np.uint8)}
    nodes, src = [], "x"
    for i, (ci, co) in enumerate(((c0, c1), (c1, c2))):
        inits |= {f"w{i}": _weights(rng, (co, ci, 3, 3), np.int8),
                  f"sw{i}": rng.uniform(0.001, 0.01, co).astype(np.float32),
                  f"zw{i}": np.zeros(co, np.int8), f"sy{i}": np.float32(0.3 + i),
                  f"zy{i}": np.array(128 - 20 * i, np.uint8),
                  f"b{i}": rng.integers(-3000, 3000, co).astype(np.int32)}  # fmt: skip
        ins = [src, "sx" if i == 0 else "sy0", "zx" if i == 0 else "zy0", f"w{i}", f"sw{i}",
               f"zw{i}", f"sy{i}", f"zy{i}", f"b{i}"]  # fmt: skip
        dst = "y" if i else "y0"
        nodes.append(helper.make_node("QLinearConv", ins, [dst], pads=[1, 1, 1, 1]))
        src = dst
    vis = [helper.make_tensor_value_info("x", TensorProto.UINT8, [1, c0, *hw])]
    out = helper.make_tensor_value_info("y", TensorProto.UINT8, None)
    g = helper.make_graph(nodes, "t", vis, [out],
                          [numpy_helper.from_array(np.asarray(v), k) for k, v in inits.items()])  # fmt: skip
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 13)])


@pytest.mark.parametrize("cls", [None, "avx2"])
def test_layers_sharing_a_micro_kernel_equal_the_reference(cls: str | None) -> None:
    check(two_convs(), _target(cls) if cls else host_target(), threads=(1, 2))


def test_the_shared_conv_micro_kernel_keeps_its_accumulators_in_registers() -> None:
    """FileCheck-style, on the VNNI build of two layers sharing the 12 x 2 tile: its loop
    reloads nothing from the stack (with the weights' rows a run-time stride apart LLVM
    kept twelve row pointers and spilled accumulators: half the speed in whole models)."""
    import llvmlite.binding as llvm

    from guard.compiler.codegen.build import generate
    from guard.compiler.runtime.weights import pack_weights

    target = codegen_target(CLASSES["avx512_vnni"])
    compiled = plan(optimize(import_onnx(two_convs(), {}), "O0")[0])
    _, layout = pack_weights({k: c.data for k, c in compiled.graph.constants.items()})
    code = generate(compiled, layout, target)
    mod = llvm.parse_assembly(code.generated.ir_text)
    asm = target.target_machine().emit_assembly(mod)
    fn = asm[asm.index("guard.qukr.avx512_vnni.12x2v16.conv.u8.l32:") :]
    fn = fn[: fn.index(".Lfunc_end")]
    loop = max(re.split(r"\n(?=\.LBB)", fn), key=lambda blk: blk.count("vpdpbusd"))
    assert loop.count("vpdpbusd") >= 24
    assert not re.search(r"vmov\w*\s+[^\n]*\(%rsp\)", loop), loop


@pytest.mark.parametrize("cls", ["avx512_vnni", "avx512bw"])
def test_narrow_rows_use_256_bit_steps_on_avx512(cls: str) -> None:
    """A 7-pixel row in 8-lane vectors (the 16-lane tile and its 512-bit steps are kept
    for wider rows), bit-identical to the reference."""
    code = check(qconv(**CONVS["narrow"]), _target(cls), threads=(1, 2))
    ir_text = code.generated.ir_text
    if cls == "avx512_vnni":
        assert "llvm.x86.avx512.vpdpbusd.256" in ir_text
        assert "llvm.x86.avx512.vpdpbusd.512" not in ir_text
    else:
        assert "llvm.x86.avx2.pmadd.wd" in ir_text


def test_unsupported_int8_nodes_decline_with_the_reason() -> None:
    rng = np.random.default_rng(0)
    w = _weights(rng, (8, 4), np.int8)
    inits = {"sa": np.float32(0.1), "za": np.uint8(3), "sb": np.float32(0.1),
             "zb": np.int8(0), "sy": np.float32(0.2), "zy": np.uint8(4)}  # fmt: skip
    node = helper.make_node("QLinearMatMul", ["x", "sa", "za", "w", "sb", "zb", "sy", "zy"], ["y"])
    m = _model(node, (2, 8), np.uint8, np.uint8, inits, [("w", TensorProto.INT8, [8, 4])])
    assert w.shape == (8, 4)
    g, _ = optimize(import_onnx(m, {}), "O0")
    declines = [d.get("native") for d in plan(g).partitions.declines.values()]
    assert any(d and "run-time weights" in d for d in declines), declines


A64 = {"neon": "+neon", "neon_dotprod": "+neon,+dotprod", "neon_i8mm": "+neon,+dotprod,+i8mm"}
A64_OP = {"neon": None, "neon_dotprod": "llvm.aarch64.neon.sdot", "neon_i8mm": "usdot"}


@pytest.mark.parametrize("cls", list(A64))
def test_aarch64_int8_code_under_qemu_equals_the_reference(tmp_path, cls: str) -> None:
    """NEON with and without dotprod / i8mm: the artefact's code, run under
    qemu-aarch64-static, gives the reference's bits (the x86 result)."""
    import shutil

    from guard.compiler.runtime.artefact import save_artefact
    from guard.emulate.bundled import load_emulated
    from guard.emulate.tools import TOOLCHAINS
    from guard.manifest.target_string import canonicalize

    tc = TOOLCHAINS["aarch64"]
    if host_target().arch == "aarch64" or shutil.which(tc.emulator) is None:
        pytest.skip(f"{tc.emulator} not installed (apt-get install -y {tc.emulator_package} "
                    f"{tc.compiler_package} {tc.libc_package}) or the host is AArch64")  # fmt: skip
    if shutil.which(tc.compiler) is None:
        pytest.skip(f"{tc.compiler} not installed")
    target = canonicalize(f"llvm -mtriple=aarch64-linux-gnu -mattr={A64[cls]}")
    assert codegen_target(target).int_dot == cls
    for i, m in enumerate((qconv(**CONVS["zw"]), qconv(**CONVS["s8"]), qmatmul(**MATMULS["u8w"]))):
        g, _ = optimize(import_onnx(m, {}), "O0")
        out_dir = tmp_path / str(i)
        save_artefact(plan(g), out_dir, pipeline="O0", target=target)
        if A64_OP[cls]:
            assert A64_OP[cls] in (out_dir / "kernels.ll").read_text()
        session = load_emulated(out_dir, 1)
        for seed in (1, 2):
            f = _feeds(g, seed)
            np.testing.assert_array_equal(session.run(f)[0], run_reference(g, f)["y"])


@pytest.mark.parametrize("cls", [None, "avx2"])
def test_fused_clamp_and_int32_bias_equal_the_reference(cls: str | None) -> None:
    """What the QDQ fold writes: QLinearConv / QLinearMatMul with ``qmin``/``qmax`` (a fused
    Relu/Clip) and QLinearMatMul's 9th input, an int32 bias per output column."""
    target = _target(cls) if cls else host_target()
    for m, n in ((qmatmul(**MATMULS["tile"]), 48), (qconv(**CONVS["3x3"]), 16)):
        g = import_onnx(m, {})
        node = next(iter(g))
        if node.op == "QLinearMatMul":
            bias = np.random.default_rng(5).integers(-2000, 2000, n).astype(np.int32)
            node.inputs = [*node.inputs, g.add_constant("bias", bias).name]
        node.attrs["qmin"], node.attrs["qmax"] = 120, 150
        g2, _ = optimize(g, "O0")
        compiled = plan(g2)
        assert compiled.partition_report["fallback_nodes"] == 0
        rt, _ = jit(compiled, target)
        f = _feeds(g, 4)
        ref = run_reference(g, f)["y"]
        assert ref.min() == 120 and ref.max() == 150  # the clamp is exercised
        np.testing.assert_array_equal(rt.run(f)["y"], ref)
