"""Fuzzing the documents guard reads (suite YAML, results files): exit 2 with one line,
never exit 3, never a hang. A derandomized sample of 16 by default, a few hundred cases in the
slow run; ``python tests/fuzz/documents_harness.py --cases N`` for more."""

from __future__ import annotations

import os
import time

import pytest
from documents_harness import Hang, Outcome, fuzz_documents, violations, watchdog


def _check(cases: int, tmp_path) -> None:
    report = fuzz_documents(cases, tmp_path)
    print(f"documents fuzz: {report.summary()}")
    assert report.cases == cases
    assert report.exit3() == 0 and report.breaches == [], "\n".join(
        f"{kind}: {'; '.join(why)}: {err}" for kind, err, why in report.breaches
    )
    # The mutations reach every reader and mostly break the document (exit 2).
    assert {kind for kind, _ in report.exits} == {"suite", "compare", "merge"}
    assert sum(n for (_, rc), n in report.exits.items() if rc == 2) > cases // 2


def test_a_sample_of_mutated_documents_keeps_the_contract(tmp_path):
    _check(16, tmp_path)


@pytest.mark.fuzz
@pytest.mark.slow
def test_hundreds_of_mutated_documents_keep_the_contract(tmp_path):
    _check(int(os.environ.get("GUARD_FUZZ_DOC_CASES", "400")), tmp_path)


def test_the_oracle_and_the_watchdog_are_not_vacuous():
    assert violations(Outcome("compare", 2, "guard: error: x.json: results[0]: bad", 0.1)) == []
    assert violations(Outcome("compare", 3, "guard: internal error: TypeError", 0.1))
    assert violations(Outcome("suite", None, "", 30.0)) == ["no answer within 30 s"]
    assert violations(Outcome("merge", 2, "no error line", 0.1))
    assert violations(Outcome("merge", 2, "guard: error: a\nguard: error: b", 0.1))
    t0 = time.monotonic()
    with pytest.raises(Hang), watchdog(0.2):
        time.sleep(5)
    assert time.monotonic() - t0 < 2
