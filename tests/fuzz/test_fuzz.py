"""Fuzzing guard's inputs: replay the corpus of past breaches; a bounded hypothesis run.

``pytest tests/fuzz`` replays every corpus case and fuzzes for GUARD_FUZZ_SECONDS (default
60). Longer, on demand: ``python tests/fuzz/run_fuzz.py --minutes 60``.
"""

from __future__ import annotations

import os

import pytest
from fuzz_harness import Case, base_suite, convnet, fuzz, load_corpus, run_case, violations

CORPUS = load_corpus()


@pytest.mark.parametrize(("name", "case"), CORPUS, ids=[n for n, _ in CORPUS])
def test_corpus_case_keeps_the_contract(tmp_path, name, case):
    out = run_case(case, tmp_path)
    assert violations(out) == [], f"{name}: {out.stderr[-3000:]}"


@pytest.mark.slow
def test_the_contract_check_catches_breaches(tmp_path):
    """The oracle is not vacuous: a valid case passes, an internal error is caught."""
    import yaml

    good = Case(yaml.safe_dump(base_suite()).encode(), convnet().SerializeToString())
    out = run_case(good, tmp_path)
    assert out.rc == 0 and violations(out) == [], out.stderr
    from fuzz_harness import Outcome

    assert violations(Outcome(3, None, False, "guard: internal error: KeyError", 1.0))
    assert violations(Outcome(None, "SIGSEGV", False, "", 1.0)) == ["killed by SIGSEGV"]
    assert violations(Outcome(None, None, True, "", 200.0))
    assert violations(Outcome(2, None, False, "no error line", 1.0))


@pytest.mark.fuzz
@pytest.mark.slow
def test_fuzz_for_a_bounded_time(tmp_path):
    seconds = float(os.environ.get("GUARD_FUZZ_SECONDS", "60"))
    report = fuzz(seconds, tmp_path)
    print(f"fuzz: {report.summary()}")
    assert report.cases > 0
    assert report.breaches == [], (
        report.summary() + "\n" + "\n".join(f"{d}: {why}" for d, why in report.breaches)
    )
