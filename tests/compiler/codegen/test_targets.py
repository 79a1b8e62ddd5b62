"""The code generator's target comes from the canonical target string, never the host by
accident: the vector width follows the features, other architectures get their own
objects, and unknown CPUs/features are bad input (exit 2) naming the string."""

from __future__ import annotations

import pytest
from onnx import helper

from guard.compiler import import_onnx, optimize
from guard.compiler.codegen.build import generate, jit
from guard.compiler.codegen.llvm_target import (
    CodegenTarget,
    codegen_target,
    host_target,
    runnable_here,
)
from guard.compiler.partition.plan import plan
from guard.compiler.runtime.weights import pack_weights
from guard.core.errors import UsageError

from .test_emitters import model, rnd


def _compiled():
    nodes = [
        helper.make_node("Conv", ["x", "w"], ["a"], pads=[1, 1, 1, 1]),
        helper.make_node("Relu", ["a"], ["r"]),
        helper.make_node("Flatten", ["r"], ["f"]),
        helper.make_node("Gemm", ["f", "g"], ["y"], transB=1),
    ]
    m = model(nodes, [("x", [1, 16, 6, 6])], ["y"], [("w", rnd(16, 16, 3, 3)), ("g", rnd(10, 576))])
    g, _ = optimize(import_onnx(m, {}), "O2")
    return plan(g)


def _gen(target: str):
    c = _compiled()
    _, layout = pack_weights({k: v.data for k, v in c.graph.constants.items()})
    return generate(c, layout, codegen_target(target))


@pytest.mark.parametrize(
    "target,width",
    [
        ("llvm -mtriple=x86_64-linux-gnu -mcpu=skylake-avx512 -mattr=+avx512f,+avx2,+fma", 16),
        ("llvm -mtriple=x86_64-linux-gnu -mcpu=haswell -mattr=+avx2,+fma", 8),
        # the class follows what the CPU name implies, not only the listed features
        ("llvm -mtriple=x86_64-linux-gnu -mcpu=x86-64-v3", 8),
        ("llvm -mtriple=x86_64-linux-gnu -mcpu=skylake-avx512", 16),
        ("llvm -mtriple=x86_64-linux-gnu -mcpu=skylake-avx512 -mattr=-avx512f", 8),
        ("llvm -mtriple=aarch64-linux-gnu -mattr=+neon", 4),
    ],
)
def test_vector_width_follows_the_target(target, width):
    code = _gen(target)
    assert code.target.vector_width == width
    text = code.generated.ir_text
    assert f"<{width} x float>" in text  # FileCheck-style: the kernels are vectorised
    assert f"llvm.fma.v{width}f32" in text  # the explicit vector FMA, at the target's width
    obj = code.generated.object_code
    assert obj[:4] == b"\x7fELF"
    machine = int.from_bytes(obj[18:20], "little")
    assert machine == (
        183 if target.startswith("llvm -mtriple=aarch64") else 62
    )  # EM_AARCH64/X86_64


def test_an_avx512_object_runs_only_where_avx512_is():
    t = codegen_target("llvm -mtriple=x86_64-linux-gnu -mcpu=skylake-avx512")
    why = runnable_here(t)
    if host_target().isa == "avx512":
        assert why is None
    else:
        assert why and "avx512" in why and host_target().cpu in why
    assert runnable_here(codegen_target("llvm -mtriple=x86_64-linux-gnu -mcpu=x86-64")) is None


def test_an_object_for_another_arch_is_not_runnable_here_and_says_both():
    other = "aarch64-linux-gnu" if host_target().arch == "x86_64" else "x86_64-linux-gnu"
    why = runnable_here(CodegenTarget(other, "generic", ()))
    assert why and other in why and host_target().triple in why
    assert runnable_here(host_target()) is None


@pytest.mark.parametrize(
    "bad,named", [("llvm -mcpu=bogus", "bogus"), ("llvm -mattr=+nosuchfeature", "nosuchfeature")]
)
def test_unknown_cpu_or_feature_is_bad_input_naming_it(bad, named):
    with pytest.raises(UsageError, match=named) as exc:
        codegen_target(bad)
    assert exc.value.exit_code == 2


def _conv_net(c: int):
    nodes = [
        helper.make_node("Conv", ["x", "w0"], ["a"], pads=[1, 1, 1, 1]),
        helper.make_node("Relu", ["a"], ["r"]),
        helper.make_node("Conv", ["r", "w1"], ["b"], pads=[1, 1, 1, 1]),
        helper.make_node("Add", ["b", "r"], ["s"]),
        helper.make_node("Conv", ["s", "w2"], ["d"], pads=[1, 1, 1, 1], group=c),
        helper.make_node("MaxPool", ["d"], ["p"], kernel_shape=[2, 2], strides=[2, 2]),
        helper.make_node("GlobalAveragePool", ["p"], ["q"]),
        helper.make_node("Flatten", ["q"], ["f"]),
        helper.make_node("Gemm", ["f", "g"], ["y"], transB=1),
    ]
    weights = [("w0", rnd(c, 3, 3, 3)), ("w1", rnd(c, c, 3, 3)), ("w2", rnd(c, 1, 3, 3))]
    return model(nodes, [("x", [2, 3, 14, 18])], ["y"], [*weights, ("g", rnd(10, c))])


@pytest.mark.parametrize("isa", ["avx2", "avx512"])
@pytest.mark.parametrize("channels", [16, 24])
def test_code_for_each_class_matches_the_reference(isa, channels):
    """A conv net built for each x86 class: its layouts are the class's (NCHW8c on AVX2;
    NCHW16c on AVX-512, NHWC where 16 does not divide the channels), two layout
    conversions in the partition report, and outputs equal to the numpy reference."""
    import numpy as np

    from guard.compiler import run_reference

    from ._jit import skip_unless_runnable

    target = skip_unless_runnable(isa)
    g0 = import_onnx(_conv_net(channels), {})
    g, _ = optimize(g0, "O2", target=target.table)
    compiled = plan(g)
    want = {16: "NCHW16c", 24: "NHWC"}[channels] if isa == "avx512" else "NCHW8c"
    convs = [n for n in g.nodes if n.op == "FusedConv"]
    # 3 input channels do not block: a blocked region starts after the stem
    assert convs[0].attrs.get("layout") == ("NHWC" if want == "NHWC" else None)
    assert {n.attrs.get("layout") for n in convs[1:]} == {want}
    rep = compiled.partition_report
    assert rep["count"] == 1 and rep["layout_conversions"] == 2
    rt, code = jit(compiled, target)
    assert f"<{target.vector_width} x float>" in code.generated.ir_text
    x = np.random.default_rng(3).standard_normal((2, 3, 14, 18)).astype(np.float32)
    got, ref = rt.run({"x": x}), run_reference(g0, {"x": x})
    np.testing.assert_allclose(got["y"], ref["y"], rtol=1e-4, atol=1e-4)
