"""onnx's recurrent conformance cases (gru, lstm, simple_rnn and rnn: defaults, initial bias,
reverse, bidirectional, batchwise = layout 1, seq_length, peepholes with sequence_lens)
through generated code: every one passes with every node native. W and R are graph inputs
in all of them, so they run the per-step emitters after batch_recurrent_inputs' GEMM with W
read transposed; the batchwise ones go through recurrent_sequence_first. The whole suite's
count is test_onnx_conformance_native (slow); this subset takes seconds."""

from __future__ import annotations

import os
import tempfile
import unittest

os.environ.setdefault("ONNX_HOME", tempfile.mkdtemp(prefix="onnx_home_"))

import onnx.backend.test  # noqa: E402

from guard.compiler.runtime.conformance import GuardNativeBackend  # noqa: E402

KINDS = ("lstm", "gru", "rnn")


def test_the_recurrent_conformance_cases_run_natively() -> None:
    bt = onnx.backend.test.BackendTest(GuardNativeBackend, "native_recurrent")
    suite = unittest.TestSuite()
    for case in bt.test_cases.values():
        suite.addTests(unittest.defaultTestLoader.loadTestsFromTestCase(case))
    outcome: dict[str, tuple[bool, bool]] = {}
    for test in suite:
        name = test.id().rsplit(".", 1)[-1]
        if not name.endswith("_cpu") or not any(k in name for k in KINDS):
            continue
        GuardNativeBackend.reps.clear()
        result = unittest.TestResult()
        test.run(result)
        reps = GuardNativeBackend.reps
        outcome[name] = (result.wasSuccessful() and not result.skipped,
                         bool(reps) and all(r.all_native for r in reps))  # fmt: skip
    assert len(outcome) >= 18, sorted(outcome)  # onnx 1.23 has 18
    assert {"test_lstm_batchwise_cpu", "test_lstm_with_peepholes_cpu"} <= set(outcome)
    assert {k: v for k, v in outcome.items() if v != (True, True)} == {}
