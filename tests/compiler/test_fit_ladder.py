"""The budget ladder: units, the climb, its bound, its reports, the arena check and the
``guard fit`` command (exit 0 fits, 1 does not, 2 bad budget)."""

from __future__ import annotations

import json

import pytest

from guard.checks.evaluate import arena_check
from guard.compiler import import_onnx, optimize
from guard.compiler.fit.int8 import INT8_UNAVAILABLE
from guard.compiler.fit.ladder import climb
from guard.core.budget_bytes import fmt_bytes, parse_budget
from guard.core.errors import UsageError
from guard.results.result import MemoryBudget
from guard.zoo.cache import model_path


@pytest.mark.parametrize(
    ("value", "want"),
    [(2097152, 2097152), ("2MiB", 2 * 2**20), ("512 KiB", 512 * 1024), ("1.5MB", 1_500_000),
     ("3kB", 3000), ("1GiB", 2**30), ("64B", 64), ("100", 100)],
)  # fmt: skip
def test_budget_units(value, want):
    assert parse_budget(value, "k") == want


@pytest.mark.parametrize("value", [0, -5, "0MiB", "-1KiB", "2TB", "2 mib", "lots", True, None])
def test_bad_budget_names_the_key(value):
    with pytest.raises(UsageError, match="options.bundled.memory_budget"):
        parse_budget(value, "options.bundled.memory_budget")


@pytest.fixture(scope="module")
def inception():
    g = import_onnx(model_path("inception_block"), None)
    return optimize(g, "O2")[0]


def test_fits_at_the_first_rung_that_fits(inception):
    free = climb(inception, 1 << 40)
    assert free.fits and free.rung == 1 and len(free.steps) == 1  # stops at the first fit
    views = free.steps[0].arena_bytes
    full = climb(inception, views - 1, stop_at_fit=False)
    schedule = full.steps[1]
    assert schedule.name == "schedule" and schedule.arena_bytes < views  # 4 live branches
    ladder = climb(inception, schedule.arena_bytes)
    assert ladder.fits and ladder.rung == 2 and ladder.chosen.arena_bytes <= ladder.budget_bytes
    assert "fits" in ladder.summary() and "rung 2 (schedule)" in ladder.summary()
    d = ladder.to_dict()
    assert {"bytes", "fits", "rung", "ladder"} <= set(d)
    assert {"rung", "arena_bytes", "latency_cost_pct", "what"} <= set(d["ladder"][0])


def test_below_the_reachable_minimum_names_it_and_what_bounds_it(inception):
    ladder = climb(inception, 1024)
    assert not ladder.fits and ladder.rung is None
    reachable = [s.arena_bytes for s in ladder.steps if s.arena_bytes is not None]
    assert ladder.smallest_bytes == min(reachable)
    assert ladder.bound_by and all(b["bytes"] > 0 for b in ladder.bound_by)
    assert fmt_bytes(ladder.smallest_bytes) in ladder.summary()
    assert [s.name for s in ladder.steps][-2:] == ["int8", "spill"]
    int8 = ladder.steps[-2]
    assert int8.what == INT8_UNAVAILABLE and int8.arena_bytes is None
    check = arena_check(None, ladder.chosen.arena_bytes, None, MemoryBudget.of(ladder.to_dict()))
    assert check.status == "fail" and "smallest reachable" in check.message


def test_search_is_bounded(inception):
    ticks = iter(range(0, 10**6, 100))  # every clock read is 100 s later
    ladder = climb(inception, 1024, search_s=30.0, clock=lambda: float(next(ticks)))
    cut = [s for s in ladder.steps if "search bound" in s.what]
    assert cut and all(s.arena_bytes is None for s in cut)


def test_arena_check_names_the_rung():
    budget = {
        "bytes": 1000, "fits": True, "rung": 2,
        "ladder": [{"rung": 2, "name": "schedule", "what": "order searched",
                    "latency_cost_pct": 1.5}],
    }  # fmt: skip
    c = arena_check(None, 900, 800, MemoryBudget.of(budget))
    assert c.status == "pass" and c.bound == 1000
    assert "fits at rung 2 (schedule" in c.message and "+1.5%" in c.message


def test_guard_fit_command(capsys):
    from guard.cli.main import main

    assert main(["fit", "zoo:inception_block", "--budget", "1GiB", "--no-latency"]) == 0
    out = capsys.readouterr().out
    assert "1 views" in out and "fits" in out
    assert main(["fit", "zoo:inception_block", "--budget", "1KiB", "--no-latency", "--json"]) == 1
    report = json.loads(capsys.readouterr().out)
    assert not report["fits"] and report["smallest_reachable_bytes"] > 1024
    assert main(["fit", "zoo:inception_block", "--budget", "0"]) == 2
    assert "--budget" in capsys.readouterr().err


def test_int8_rung_counts_a_quantised_models_8bit_tensors_and_points_others_at_quantize():
    from ._helpers import HEADER, graph_of

    g = graph_of(
        f"""{HEADER}
        agraph (float[64,256] x) => (float[64,256] y) <float s = {{0.1}}, uint8 z = {{128}}> {{
            q = QuantizeLinear(x, s, z)
            y = DequantizeLinear(q, s, z)
        }}"""
    )
    ladder = climb(g, 1024)
    int8 = next(s for s in ladder.steps if s.name == "int8")
    # q: 64 x 256 uint8 = 16 KiB of the arena's tensors
    assert int8.what.startswith("already int8") and "16.0 KiB" in int8.what
    assert int8.arena_bytes == ladder.steps[0].arena_bytes  # counted, nothing changed
    float_only = climb(import_onnx(model_path("inception_block"), None), 1024)
    assert next(s for s in float_only.steps if s.name == "int8").what == INT8_UNAVAILABLE


def test_measure_past_its_deadline_builds_only_the_unconstrained_plan(inception):
    import itertools

    from guard.compiler.fit.measure import measure
    from guard.compiler.fit.report import text

    ladder = climb(inception, 1024, stop_at_fit=False)
    others = [
        s.rung for s in ladder.steps if s.plan is not None and s.plan is not ladder.steps[0].plan
    ]
    assert others  # the schedule rung's plan differs from the unconstrained one
    ticks = itertools.count(0.0, 10.0)  # every clock read is 10 s later
    measured = measure(ladder, seconds=1.0, deadline=15.0, clock=lambda: next(ticks))
    assert measured.unmeasured == tuple(others)
    assert measured.steps[0].latency_cost_pct == 0.0
    assert all(s.latency_cost_pct is None for s in measured.steps if s.rung in others)
    assert f"latency of rung(s) {', '.join(map(str, others))} not measured" in text(
        measured, "inception_block", True
    )


def test_measure_at_its_deadline_builds_nothing(inception):
    from guard.compiler.fit.measure import measure

    ladder = climb(inception, 1024, stop_at_fit=False)
    measured = measure(ladder, seconds=1.0, deadline=0.5, clock=lambda: 0.0)
    assert measured.unmeasured == tuple(s.rung for s in ladder.steps if s.plan is not None)
    assert all(s.latency_cost_pct is None for s in measured.steps)
