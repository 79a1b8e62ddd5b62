"""LSTM, GRU and RNN built for AArch64 (NEON) and run under qemu-aarch64 at 1 and 2 threads:
bit-identical, equal to the reference interpreter. One model chains a bidirectional LSTM, a
two-phase GRU (without linear_before_reset) and a reverse RNN, each with ``sequence_lens``
(a row of full length, a shorter one and one of length 0); with the recurrence's floors
lowered every layer runs as chunks of blocks claimed on the pool, waiting with AArch64's
spin hint (guard.compiler.codegen.recurrence). On an AArch64 host the test skips: the roles
would swap (tests/compiler/codegen/test_recurrence*.py cover the host)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from emulate_fakes import tools_mark
from onnx import TensorProto, helper, numpy_helper

from guard.compiler import import_onnx, optimize, run_reference
from guard.compiler.codegen import recurrence
from guard.compiler.ir.isa_table import table_for
from guard.compiler.partition.plan import plan
from guard.compiler.runtime.artefact import save_artefact
from guard.emulate import host_arch
from guard.emulate.bundled import load_emulated
from guard.emulate.tools import TOOLCHAINS
from guard.manifest.target_string import canonicalize

TC = TOOLCHAINS["aarch64"]
NEON = "llvm -mtriple=aarch64-linux-gnu -mattr=+neon"
SEQ, BATCH, N_IN, HIDDEN = 6, 3, 12, 40  # 40 units: five blocks of two NEON vectors

pytestmark = [
    pytest.mark.slow,
    pytest.mark.emulated,
    pytest.mark.skipif(host_arch() == "aarch64", reason="the host's tests cover AArch64 here"),
    tools_mark(TC),
]


def _chain():
    """x -> BiLSTM -> [S, B, 2H] -> GRU -> [S, B, H] -> reverse RNN; outputs the RNN's Y and
    Y_h, the GRU's Y_h and the LSTM's Y_c."""
    rng = np.random.default_rng(5)

    def w(name: str, *shape: int) -> None:
        inits.append(numpy_helper.from_array(
            (rng.standard_normal(shape) / np.sqrt(shape[-1])).astype(np.float32), name))  # fmt: skip

    h, inits = HIDDEN, []
    w("lw", 2, 4 * h, N_IN), w("lr", 2, 4 * h, h), w("lb", 2, 8 * h)
    w("gw", 1, 3 * h, 2 * h), w("gr", 1, 3 * h, h), w("gb", 1, 6 * h)
    w("rw", 1, h, h), w("rr", 1, h, h), w("rb", 1, 2 * h)
    inits += [
        numpy_helper.from_array(np.array([SEQ, SEQ - 2, 0], np.int32), "lens"),
        numpy_helper.from_array(np.array([SEQ, BATCH, 2 * h], np.int64), "s2"),
        numpy_helper.from_array(np.array([SEQ, BATCH, h], np.int64), "s1"),
    ]
    nodes = [
        helper.make_node("LSTM", ["x", "lw", "lr", "lb", "lens"], ["ly", "", "lc"],
                         hidden_size=h, direction="bidirectional"),
        helper.make_node("Transpose", ["ly"], ["lt"], perm=[0, 2, 1, 3]),
        helper.make_node("Reshape", ["lt", "s2"], ["g_in"]),
        helper.make_node("GRU", ["g_in", "gw", "gr", "gb", "lens"], ["gy", "gh"], hidden_size=h),
        helper.make_node("Reshape", ["gy", "s1"], ["r_in"]),
        helper.make_node("RNN", ["r_in", "rw", "rr", "rb", "lens"], ["ry", "rh"],
                         hidden_size=h, direction="reverse"),
    ]  # fmt: skip
    outs = ["ry", "rh", "gh", "lc"]
    graph = helper.make_graph(
        nodes, "chain", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [SEQ, BATCH, N_IN])],
        [helper.make_tensor_value_info(o, TensorProto.FLOAT, None) for o in outs], inits,
    )  # fmt: skip
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 14)])


def test_the_recurrent_layers_under_emulation_equal_the_reference(tmp_path: Path, monkeypatch):
    monkeypatch.setattr(recurrence, "CHUNK_FLOPS", 1)  # one block per chunk
    monkeypatch.setattr(recurrence, "PARALLEL_FLOPS", 1)  # on the pool
    g0 = import_onnx(_chain())
    g, _ = optimize(g0, "O2", target=table_for("neon"))
    compiled = plan(g)
    assert compiled.partition_report["fallback_nodes"] == 0, compiled.partition_text()
    save_artefact(compiled, tmp_path / "rnn", pipeline="O2", target=canonicalize(NEON))
    ir_text = (tmp_path / "rnn" / "kernels.ll").read_text()
    assert ir_text.count("_steps(") >= 3 and "llvm.aarch64.isb" in ir_text  # claim loops
    x = (np.random.default_rng(11).standard_normal((SEQ, BATCH, N_IN)) * 2).astype(np.float32)
    one = load_emulated(tmp_path / "rnn", 1)
    got = [one.run({"x": x}), load_emulated(tmp_path / "rnn", 2).run({"x": x})]
    assert all(np.array_equal(a, b) for a, b in zip(*got, strict=True))
    want = run_reference(g0, {"x": x})
    for name, a in zip(one.output_names, got[0], strict=True):
        np.testing.assert_allclose(a, want[name], rtol=1e-4, atol=1e-5, err_msg=name)
    assert not got[0][0][:, :, 2].any()  # the row of length 0: Y zero
