"""recurrent_sequence_first: a batch-first RNN/GRU/LSTM as a sequence-first one between
transposes; with batch 1 only Reshapes; equal to the batch-first node in the reference
interpreter (every op, both directions, initial states as constants and as inputs)."""

from __future__ import annotations

import numpy as np
import pytest
from onnx import TensorProto, helper, numpy_helper

from guard.compiler import import_onnx, optimize, run_reference
from guard.compiler.passes.recurrent_sequence_first import RecurrentSequenceFirst

from .test_batch_recurrent_inputs import recurrent_model, rnd

ENTRY = [(RecurrentSequenceFirst(), "under test")]


@pytest.mark.parametrize("batch", [1, 2])
def test_batch_first_runs_sequence_first_between_transposes(batch) -> None:
    """layout=1: X, the initial states and the outputs transposed around a layout-0 node;
    with batch 1 every transpose is a Reshape (only an axis of size 1 moves); constant
    initial states are transposed here."""
    model = recurrent_model("LSTM", "bidirectional", True, batch=batch, layout=1)
    x_dims = model.graph.input[0].type.tensor_type.shape.dim
    x_dims[0].dim_value, x_dims[1].dim_value = batch, 5
    for init in model.graph.initializer:  # initial_h [B, D, H] batch first
        if init.name == "h0":
            init.CopyFrom(numpy_helper.from_array(rnd(batch, 2, 4, seed=4), "h0"))
    g0 = import_onnx(model)
    g, report = optimize(g0, entries=ENTRY, verify_each=True)
    assert report.passes[0].stats["num_rewritten"] == 1
    (rec,) = [n for n in g.nodes if n.op == "LSTM"]
    assert rec.attrs["layout"] == 0 and g.values[rec.outputs[0]].shape == (5, 2, batch, 4)
    assert g.const(rec.inputs[5]) is not None  # h0 transposed at compile time
    ops = g.op_counts()
    assert ops.get("Transpose", 0) == (0 if batch == 1 else 4)  # X, Y, Y_h, Y_c
    assert ops.get("Reshape", 0) == (4 if batch == 1 else 0)
    x = rnd(batch, 5, 3, seed=12)
    want, got = run_reference(g0, {"x": x}), run_reference(g, {"x": x})
    for k in want:
        assert got[k].shape == want[k].shape
        np.testing.assert_allclose(got[k], want[k], rtol=1e-5, atol=1e-6, err_msg=k)


@pytest.mark.parametrize("op", ["RNN", "GRU", "LSTM"])
@pytest.mark.parametrize("direction", ["forward", "reverse"])
def test_initial_states_as_inputs_are_transposed_in(op, direction) -> None:
    """initial_h (and initial_c) graph inputs, batch first: Transposes in, values unchanged."""
    batch, d, hs = 3, 1, 4
    model = recurrent_model(op, direction, False, batch=batch, layout=1)
    dims = model.graph.input[0].type.tensor_type.shape.dim
    dims[0].dim_value, dims[1].dim_value = batch, 5
    node = model.graph.node[0]
    states = ["h0", "c0"] if op == "LSTM" else ["h0"]
    node.input.extend(["", "", *states])
    model.graph.input.extend(
        helper.make_tensor_value_info(s, TensorProto.FLOAT, [batch, d, hs]) for s in states
    )
    g0 = import_onnx(model)
    g, _ = optimize(g0, entries=ENTRY, verify_each=True)
    (rec,) = [n for n in g.nodes if n.op == op]
    assert rec.attrs["layout"] == 0 and g.values[rec.inputs[5]].shape == (d, batch, hs)
    feeds = {"x": rnd(batch, 5, 3, seed=1)} | {
        s: rnd(batch, d, hs, seed=2 + k) for k, s in enumerate(states)
    }
    want, got = run_reference(g0, feeds), run_reference(g, feeds)
    for k in want:
        np.testing.assert_allclose(got[k], want[k], rtol=1e-6, atol=1e-7, err_msg=k)
