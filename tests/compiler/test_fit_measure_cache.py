"""guard fit's timing builds: a second ladder of the same model loads every object from the
cache (nothing emitted or compiled) and reports the same errors; the plans of one ladder
pack a shared constant once."""

from __future__ import annotations

import pytest

import guard.compiler.codegen.build as build
import guard.compiler.codegen.object_cache as oc
from guard.compiler import import_onnx, optimize
from guard.compiler.fit.ladder import climb
from guard.compiler.fit.measure import measure
from guard.zoo import model_path


@pytest.fixture(scope="module")
def ladder():
    g, _ = optimize(import_onnx(model_path("inception_block"), None), "O2")
    lad = climb(g, 1024, stop_at_fit=False)
    assert len({id(s.plan) for s in lad.steps if s.plan is not None}) >= 2
    return lad


def test_a_second_ladder_compiles_nothing(ladder, tmp_path, monkeypatch):
    calls: list[int] = []
    real = oc.emit_module
    monkeypatch.setattr(oc, "emit_module", lambda k, t: calls.append(1) or real(k, t))
    first = measure(ladder, seconds=0.1, cache=tmp_path)  # compiled here or in workers
    built = len(list(tmp_path.iterdir()))
    assert built == len({id(s.plan) for s in ladder.steps if s.plan is not None})
    again = measure(ladder, seconds=0.1, cache=tmp_path)
    assert calls == []  # every object came from the cache
    for a, b in zip(first.steps, again.steps, strict=True):
        assert a.max_abs_err == b.max_abs_err
        assert (a.latency_cost_pct is None) == (b.latency_cost_pct is None)


def test_the_plans_of_a_ladder_pack_a_shared_constant_once(ladder, monkeypatch):
    packed: list[tuple[str, int]] = []
    real = build.emitter_for

    class Counting:
        def __init__(self, op):
            self.inner = real(op)

        def __getattr__(self, name):
            return getattr(self.inner, name)

        def pack(self, op, attrs, index, value, shapes, width):
            out = self.inner.pack(op, attrs, index, value, shapes, width)
            if out is not None:
                packed.append((op, id(value)))
            return out

    monkeypatch.setattr(build, "emitter_for", Counting)
    measure(ladder, seconds=0.1)
    assert packed and len(packed) == len(set(packed))  # no constant packed twice


def test_a_cached_plan_is_measured_past_the_build_estimate(ladder, tmp_path):
    import itertools

    others = [
        s.rung for s in ladder.steps if s.plan is not None and s.plan is not ladder.steps[0].plan
    ]
    ticks = itertools.count(0.0, 10.0)  # every clock read is 10 s later: no build fits
    cold = measure(ladder, seconds=1.0, deadline=35.0, clock=lambda: next(ticks), cache=tmp_path)
    assert cold.unmeasured == tuple(others)  # only the unconstrained plan was compiled
    measure(ladder, seconds=0.1, cache=tmp_path)  # a command with time compiles the rest
    ticks = itertools.count(0.0, 10.0)
    warm = measure(ladder, seconds=1.0, deadline=35.0, clock=lambda: next(ticks), cache=tmp_path)
    assert warm.unmeasured == ()  # every object was in the cache: every rung measured
    assert all(s.latency_cost_pct is not None for s in warm.steps if s.plan is not None)
