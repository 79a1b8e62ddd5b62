from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import helper, numpy_helper

from guard.compiler import import_onnx, optimize
from guard.compiler.ir.isa_table import table_for
from guard.compiler.ir.layout import count_conversions
from guard.compiler.passes.assign_layout import AssignLayout

from ._helpers import apply, assert_same_outputs, ops


def conv_stack(channels: int = 16, n_convs: int = 3) -> onnx.ModelProto:
    rng = np.random.default_rng(0)
    nodes, inits, prev = [], [], "x"
    for i in range(n_convs):
        w = rng.standard_normal((channels, channels, 3, 3)).astype(np.float32) * 0.1
        b = rng.standard_normal((channels,)).astype(np.float32)
        inits += [numpy_helper.from_array(w, f"w{i}"), numpy_helper.from_array(b, f"b{i}")]
        nodes.append(
            helper.make_node("Conv", [prev, f"w{i}", f"b{i}"], [f"c{i}"], pads=[1, 1, 1, 1])
        )
        nodes.append(helper.make_node("Relu", [f"c{i}"], [f"r{i}"]))
        prev = f"r{i}"
    nodes.append(helper.make_node("MaxPool", [prev], ["p"], kernel_shape=[2, 2], strides=[2, 2]))
    nodes.append(helper.make_node("Flatten", ["p"], ["y"]))
    t = onnx.TensorProto.FLOAT
    graph = helper.make_graph(
        nodes,
        "g",
        [helper.make_tensor_value_info("x", t, [1, channels, 8, 8])],
        [helper.make_tensor_value_info("y", t, [1, channels * 16])],
        inits,
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def test_blocked_region_with_conversions_only_at_its_edges() -> None:
    g = import_onnx(conv_stack())
    g2, res = apply(AssignLayout(), g)
    assert ops(g2) == ["Relayout"] + ["Conv", "Relu"] * 3 + ["MaxPool", "Relayout", "Reshape"]
    assert all(n.attrs.get("layout") == "NCHW16c" for n in g2.nodes if n.op in ("Conv", "MaxPool"))
    assert g2.values["r0"].shape == (1, 1, 8, 8, 16)
    assert res.stats["num_transposes_inserted"] == 2 and res.stats["num_regions"] == 1
    assert any("NCHW16c, 2 conversions inserted" in n for n in res.notes)
    assert_same_outputs(g, g2, rtol=1e-5, atol=1e-5)


def test_nhwc_when_channels_do_not_block() -> None:
    g = import_onnx(conv_stack(channels=6))
    g2, res = apply(AssignLayout(), g)
    assert ops(g2)[0] == "Transpose" and g2.nodes[0].attrs["perm"] == [0, 2, 3, 1]
    assert g2.values["r0"].shape == (1, 8, 8, 6)
    assert_same_outputs(g, g2, rtol=1e-5, atol=1e-5)


def test_keeps_nchw_when_conversions_do_not_pay() -> None:
    g = import_onnx(conv_stack(n_convs=1))  # conv + pool: 2 anchors, 2 conversions
    g2, res = apply(AssignLayout(), g)
    assert "Relayout" not in ops(g2) and "Transpose" not in ops(g2) and not res.changed
    assert any("kept NCHW" in n for n in res.notes)


def test_a_channel_split_in_a_blocked_region_splits_whole_blocks():
    """split sizes count channels in NCHW and blocks in NCHW16c (found by test_properties)."""
    import numpy as np
    from onnx import TensorProto, helper, numpy_helper

    from guard.compiler import import_onnx, optimize, run_reference

    rng = np.random.default_rng(0)

    def w(*s):
        return rng.standard_normal(s).astype(np.float32) * 0.1

    nodes = [
        helper.make_node("Conv", ["x", "w0"], ["a"], pads=[1, 1, 1, 1]),
        helper.make_node("Split", ["a", "sp"], ["s1", "s2"], axis=1),
        helper.make_node("Conv", ["s1", "w1"], ["c1"], pads=[1, 1, 1, 1]),
        helper.make_node("Conv", ["s2", "w2"], ["c2"], pads=[1, 1, 1, 1]),
        helper.make_node("Concat", ["c1", "c2"], ["y"], axis=1),
    ]
    inits = [("w0", w(48, 16, 3, 3)), ("w1", w(16, 16, 3, 3)), ("w2", w(16, 32, 3, 3)),
             ("sp", np.array([16, 32], np.int64))]  # fmt: skip
    graph = helper.make_graph(
        nodes, "split_blocked",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 16, 6, 6])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
        [numpy_helper.from_array(v, k) for k, v in inits],
    )  # fmt: skip
    g = import_onnx(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), {})
    g2, _ = optimize(g, "O2")
    (split,) = [n for n in g2.nodes if n.op == "Split"]
    assert g2.values[split.inputs[0]].shape == (1, 3, 6, 6, 16) and split.attrs["split"] == [1, 2]
    x = rng.standard_normal((1, 16, 6, 6)).astype(np.float32)
    np.testing.assert_allclose(
        run_reference(g2, {"x": x})["y"], run_reference(g, {"x": x})["y"], rtol=1e-4, atol=1e-5
    )


@pytest.mark.parametrize(
    "isa,blocked", [("avx2", "NCHW8c"), ("avx512", "NCHW16c"), ("neon", "NCHW4c")]
)
def test_the_channel_block_is_the_target_tables(isa: str, blocked: str) -> None:
    """O2 blocks channels by the target's vector: NCHW8c on AVX2, NCHW16c on AVX-512,
    NCHW4c on NEON; one region, two conversions, counted in the final graph."""
    table = table_for(isa)
    assert table.blocked_layout == blocked
    g = import_onnx(conv_stack(channels=16))
    g2, report = optimize(g, "O2", target=table)
    convs = [n for n in g2.nodes if n.op in ("FusedConv", "Conv", "MaxPool")]
    assert convs and all(n.attrs.get("layout") == blocked for n in convs)
    assert count_conversions((n.op, n.attrs) for n in g2.nodes) == 2
    assert blocked in next(p.why for p in report.passes if p.name == "assign_layout")
    assert_same_outputs(g, g2, rtol=1e-4, atol=1e-4)


def test_channels_that_do_not_block_by_16_still_block_by_8() -> None:
    g = import_onnx(conv_stack(channels=24))
    g2, _ = optimize(g, "O2", target=table_for("avx2"))
    assert {n.attrs.get("layout") for n in g2.nodes if n.op == "FusedConv"} == {"NCHW8c"}
    g3, _ = optimize(g, "O2", target=table_for("avx512"))  # 24 % 16: NHWC instead
    assert {n.attrs.get("layout") for n in g3.nodes if n.op == "FusedConv"} == {"NHWC"}
