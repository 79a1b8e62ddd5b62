"""guard.run.shard: parsing K/N, and a plan that is deterministic, complete and balanced."""

from __future__ import annotations

import itertools

import pytest

from guard.core.errors import EXIT_BAD_INPUT, UsageError
from guard.results.documents import ResultsDocument
from guard.run.shard import parse_shard, plan, resolve_invocation_id, times_from_results, weights

CASES = [
    (m, b, "host")
    for m in ("resnet50", "squeezenet", "mlp", "digits", "transformer")
    for b in ("onnxruntime", "bundled")
]


@pytest.mark.parametrize(
    "text,k,n", [("1/4", 1, 4), ("4/4", 4, 4), (" 2 / 3 ", 2, 3), ("1/1", 1, 1)]
)
def test_parse_accepts_k_of_n(text, k, n):
    spec = parse_shard(text)
    assert (spec.index, spec.count) == (k, n)
    assert str(spec) == f"{k}/{n}"


@pytest.mark.parametrize("text", ["3/2", "0/4", "a/b", "1/0", "-1/2", "1", "1/2/3", ""])
def test_parse_refuses_bad_specs_naming_them(text):
    with pytest.raises(UsageError) as err:
        parse_shard(text)
    assert err.value.exit_code == EXIT_BAD_INPUT
    assert repr(text) in str(err.value)


def test_every_case_in_exactly_one_shard_for_every_count():
    times = {c: float(i + 1) ** 2 for i, c in enumerate(CASES)}
    for n in range(1, len(CASES) + 3):
        p = plan(CASES, n, times, "results:x")
        shards = [p.shard_cases(k) for k in range(1, n + 1)]
        assert sorted(itertools.chain(*shards)) == sorted(CASES)
        # More shards than cases: the extra shards are empty, none holds two.
        if n >= len(CASES):
            assert all(len(s) <= 1 for s in shards)


def test_plan_is_deterministic_and_keeps_suite_order_within_a_shard():
    times = {c: float(len(c[0])) for c in CASES}
    a, b = plan(CASES, 3, times, "t"), plan(list(CASES), 3, dict(times), "t")
    assert a == b and a.sha256 == b.sha256
    for k in (1, 2, 3):
        got = a.shard_cases(k)
        assert got == [c for c in CASES if c in got]


def test_balanced_by_time_beats_count_when_one_case_dominates():
    times = {c: 1.0 for c in CASES}
    times[CASES[0]] = 9.0  # one slow case: it should sit alone
    p = plan(CASES, 2, times, "results:x")
    assert p.source == "results:x"
    alone = next(k for k in (1, 2) if CASES[0] in p.shard_cases(k))
    assert p.shard_cases(alone) == [CASES[0]]
    assert sorted(p.loads()) == [9.0, 9.0]


def test_lpt_worked_example():
    # Weights 5,4,3,3,3 on 2 shards, longest first, each to the lighter shard:
    # 5->A(5), 4->B(4), 3->B(7), 3->A(8), 3->B(10): loads 8 and 10. (The optimum is 9/9,
    # {5,4} and {3,3,3}: LPT is within 4/3 of it, not always equal.)
    cases = [(f"m{i}", "b", "host") for i in range(5)]
    times = dict(zip(cases, [5.0, 4.0, 3.0, 3.0, 3.0], strict=True))
    p = plan(cases, 2, times, "t")
    assert sorted(p.loads()) == [8.0, 10.0]


def test_without_times_balances_by_count():
    p = plan(CASES, 3, None)
    assert p.source == "count"
    assert sorted(len(p.shard_cases(k)) for k in (1, 2, 3)) == [3, 3, 4]


def test_unknown_cases_weigh_the_median_of_known_ones():
    w = weights(CASES[:3], {CASES[0]: 1.0, CASES[1]: 3.0})
    assert w[CASES[2]] == 2.0


def test_plan_hash_changes_only_with_the_assignment():
    times = {c: float(i + 1) for i, c in enumerate(CASES)}
    a = plan(CASES, 2, times, "t")
    scaled = plan(CASES, 2, {c: t * 2 for c, t in times.items()}, "t")
    assert a.sha256 == scaled.sha256  # the same split: shards may safely differ in weights
    assert plan(CASES, 3, times, "t").sha256 != a.sha256


def test_times_from_results_reads_duration_s():
    doc = {
        "results": [
            {"model": "mlp", "backend": "bundled", "target": "host", "duration_s": 1.5},
            {"model": "x", "backend": "y", "target": "host", "duration_s": "fast"},
        ]
    }
    assert times_from_results(ResultsDocument.from_json(doc)) == {("mlp", "bundled", "host"): 1.5}


def test_invocation_id_precedence():
    env = {"GUARD_INVOCATION_ID": "from-env", "GITHUB_RUN_ID": "42", "GITHUB_RUN_ATTEMPT": "2"}
    assert resolve_invocation_id("flag", env, "x86_64") == "flag"
    assert resolve_invocation_id(None, env, "x86_64") == "from-env"
    env.pop("GUARD_INVOCATION_ID")
    assert resolve_invocation_id(None, env, "aarch64") == "github-42-2-aarch64"
    assert resolve_invocation_id(None, {}, "x86_64") is None


@pytest.mark.parametrize("spec", ["3/2", "0/4", "a/b"])
def test_guard_run_refuses_a_bad_shard_before_anything_runs(tmp_path, capsys, spec):
    from guard.cli.main import main

    code = main(["run", str(tmp_path / "no-such-suite.yaml"), "--shard", spec, "--no-track"])
    err = capsys.readouterr().err
    assert code == EXIT_BAD_INPUT
    assert f"--shard {spec!r}" in err and "Traceback" not in err
    assert err.strip().count("\n") == 0  # one line
