"""Concat and a stem convolution with a per-channel epilogue, on N threads: a Concat cut into
bands of its joined axis (each task copying the runs of the inputs in its band) or along an
axis before it, a convolution whose epilogue reads [K, 1, 1] operands (DenseNet's and
Inception-v2's 7x7 stem: the scale and shift of a batch norm after it) cut into runs of output
channels with those operands, one that adds a residual cut into bands of rows where its channel
runs would be uneven; outputs bit-identical for any N and equal to the reference (as
test_threads_bands.py checks for the row bands)."""

from __future__ import annotations

import pytest
from onnx import helper

from guard.compiler.codegen import split
from guard.compiler.codegen.kernel_plan import Operand, Step

from ._jit import TARGETS
from .test_emitters import model, rnd
from .test_threads_bands import split_on_threads


def _joins():
    """Concats of model inputs (nothing can write them in place): three inputs of 16, 24
    and 8 channels along the channels (eight bands of 6 channels cut inside the inputs),
    two along the rows (cut along the channels, before the joined axis)."""
    nodes = [
        helper.make_node("Concat", ["a", "b", "c"], ["y1"], axis=1),
        helper.make_node("Concat", ["a", "d"], ["y2"], axis=2),
    ]
    ins = [
        ("a", [1, 16, 6, 10]),
        ("b", [1, 24, 6, 10]),
        ("c", [1, 8, 6, 10]),
        ("d", [1, 16, 4, 10]),
    ]
    return model(nodes, ins, ["y1", "y2"])


@pytest.mark.parametrize("isa", list(TARGETS))
def test_concat_bands_are_bit_identical_for_any_thread_count(isa, monkeypatch):
    for code in split_on_threads(_joins(), isa, monkeypatch, ("y1", "y2")):
        by_out = {s.outputs[0].shape: s for s in code.plan.steps() if s.op == "Concat"}
        y1, y2 = by_out[(1, 48, 6, 10)], by_out[(1, 16, 10, 10)]
        assert [t.outputs[0].shape[1] for t in y1.parts] == [6] * 8
        # the second band takes the last 6 of a's 16 channels
        assert [o.shape[1] for o in y1.parts[2].inputs] == [4, 2]
        assert [t.outputs[0].shape[1] for t in y2.parts] == [2] * 8
        assert all([o.shape[2] for o in t.inputs] == [6, 4] for t in y2.parts)


def test_concat_tasks_cut_whole_runs_of_each_input():
    a = lambda nm, sh, off=0: Operand(nm, "arena", off, sh, "float32")  # noqa: E731
    # NCHW16c blocks: 2 + 1 blocks of 80x80, 3 blocks in 2 tasks: 1 and 2 blocks
    x0, x1 = a("x0", (1, 2, 80, 80, 16)), a("x1", (1, 1, 80, 80, 16), 1 << 20)
    y = a("y", (1, 3, 80, 80, 16), 2 << 20)
    tasks = split.concat_tasks(Step("c", "Concat", "", (x0, x1), (y,), {"axis": 1}, False))
    assert [[o.shape[1] for o in t.inputs] for t in tasks] == [[1], [1, 1]]
    assert [t.outputs[0].offset for t in tasks] == [y.offset, y.offset + 80 * 80 * 16 * 4]
    assert tasks[1].inputs[0].offset == x0.offset + 80 * 80 * 16 * 4
    # NHWC along the channels: cut along the rows before them, every input with them
    n0, n1 = a("n0", (1, 104, 104, 24)), a("n1", (1, 104, 104, 24), 1 << 21)
    nhwc = a("n", (1, 104, 104, 48), 2 << 21)
    tasks = split.concat_tasks(Step("c", "Concat", "", (n0, n1), (nhwc,), {"axis": 3}, False))
    assert len(tasks) == 8 and all(t.inputs[0].shape[1] == 13 for t in tasks)
    # an input that shares the output's memory (written in place): one call
    inplace = Step("c", "Concat", "", (x0, x1), (y,), {"axis": 1}, True)
    assert split.concat_tasks(inplace) == ()


def _stem():
    """A 7x7 stride-2 conv of 3 channels into 32 (two AVX2 vectors, two AVX-512 half
    vectors: runs of output channels) with a bias, then a per-channel scale and shift of
    shape [32, 1, 1] and a Relu, as DenseNet-121 and Inception-v2 begin."""
    nodes = [
        helper.make_node("Conv", ["x", "w", "b"], ["c"], pads=[3, 3, 3, 3], strides=[2, 2]),
        helper.make_node("Mul", ["c", "s"], ["m"]),
        helper.make_node("Add", ["m", "t"], ["a"]),
        helper.make_node("Relu", ["a"], ["y"]),
    ]
    weights = [("w", rnd(32, 3, 7, 7)), ("b", rnd(32)), ("s", rnd(32, 1, 1, seed=5)),
               ("t", rnd(32, 1, 1, seed=6))]  # fmt: skip
    return model(nodes, [("x", [1, 3, 40, 40])], ["y"], weights)


@pytest.mark.parametrize("isa", list(TARGETS))
def test_stem_with_per_channel_epilogue_splits_by_channels(isa, monkeypatch):
    for code in split_on_threads(_stem(), isa, monkeypatch):
        (conv,) = [s for s in code.plan.steps() if "Conv" in s.op]
        assert conv.op == "FusedConv" and len(conv.parts) >= 2
        epilogue = conv.inputs[int(conv.attrs["anchor_inputs"]) :]
        assert (32, 1, 1) in [o.shape for o in epilogue if o is not None]
        ks = [t.outputs[0].shape[1] for t in conv.parts]
        assert sum(ks) == 32
        for t, k in zip(conv.parts, ks, strict=True):
            assert [o.shape for o in t.inputs[3:] if o is not None] == [(k, 1, 1)] * 2


def _residual48():
    """A 1x1 conv into 48 channels whose epilogue adds a residual input (ddddocr's OCR
    blocks): 3 vectors of 16 on AVX-512, so channel runs would go 16 and 32; 6 of 8 on
    AVX2, 24 and 24."""
    nodes = [
        helper.make_node("Conv", ["x", "w"], ["c"]),
        helper.make_node("Add", ["c", "r"], ["y"]),
    ]
    return model(
        nodes, [("x", [1, 16, 12, 10]), ("r", [1, 48, 12, 10])], ["y"], [("w", rnd(48, 16, 1, 1))]
    )


@pytest.mark.parametrize("isa", list(TARGETS))
def test_a_residual_epilogue_cuts_rows_where_channel_runs_are_uneven(isa, monkeypatch):
    for code in split_on_threads(_residual48(), isa, monkeypatch):
        (conv,) = [s for s in code.plan.steps() if "Conv" in s.op]
        assert conv.op == "FusedConv" and conv.inputs[int(conv.attrs["anchor_inputs"])] is not None
        if isa == "avx512":  # the pass over each band's rows, the residual read at its offset
            assert [t.attrs["rows"] for t in conv.parts] == [
                (12 * i // 8, 12 * (i + 1) // 8) for i in range(8)
            ]
        else:  # even channel runs: kept
            assert all("rows" not in t.attrs for t in conv.parts) and len(conv.parts) == 6
