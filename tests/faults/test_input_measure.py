"""Measure blocks out of range are refused; max_time_s bounds a result's rounds too.

The rounds test drives the run with a fake clock that ticks on every read (power-of-two
ticks, so sums are exact): no real code is timed, and the bound is checked in clock ticks.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from run_helpers import small_convnet, write_suite

from guard.core.errors import SuiteError, UsageError
from guard.measure import MeasureConfig
from guard.run.runner import RunOptions, run_suite
from guard.suite import load_suite

BASE = """schema_version: 1
suite: s
defaults:
  backends: [onnxruntime]
  measure: {measure}
models:
  - name: m
    source: m.onnx
"""


@pytest.mark.parametrize(
    ("measure", "key", "words"),
    [
        ("{rounds: 9e15}", "rounds", "out of range (1..1000)"),
        ("{rounds: 1001}", "rounds", "out of range (1..1000)"),
        ("{rounds: 0}", "rounds", "must be >= 1"),
        ("{min_iters: 10000000}", "min_iters", "out of range (1..1000000)"),
        ("{max_iters: 0}", "max_iters", "must be >= 1"),
        ("{max_warmup_iters: 5000000}", "max_warmup_iters", "out of range"),
        ("{warmup_s: -1}", "warmup_s", "must be >= 0"),
        ("{max_time_s: 1.0e+6}", "max_time_s", "out of range (0..86400 s)"),
        ("{max_time_s: 0}", "max_time_s", "must be > 0"),
        ("{min_time_s: 1.0e+5}", "min_time_s", "out of range"),
        ("{min_iters: 50, max_iters: 10}", "min_iters", "exceeds max_iters"),
    ],
)
def test_a_measure_field_out_of_range_is_refused(tmp_path, measure, key, words):
    p = tmp_path / "s.yaml"
    p.write_text(BASE.format(measure=measure))
    with pytest.raises(SuiteError) as info:
        load_suite(p)
    assert f"defaults.measure.{key}" in str(info.value) and words in str(info.value)


def test_measure_config_checks_the_same_ranges():
    with pytest.raises(UsageError, match=r"rounds: 5000 is out of range \(1\.\.1000\)"):
        MeasureConfig.from_dict({"rounds": 5000}, where="m.measure")
    assert MeasureConfig.from_dict({"rounds": 1000}, where="m.measure").rounds == 1000


class TickingClock:
    """Each read moves time on by 1/64 s: a round costs what its reads cost."""

    TICK = 2.0**-6

    def __init__(self) -> None:
        self.t = 0.0

    def __call__(self) -> float:
        self.t += self.TICK
        return self.t


def _fast_rounds_suite(tmp_path: Path, rounds: int, max_time_s: float) -> Path:
    model = small_convnet(tmp_path / "c.onnx")
    return write_suite(
        tmp_path,
        f"""
    schema_version: 1
    suite: rounds
    defaults:
      backends: [onnxruntime]
      measure: {{warmup_s: 0, min_iters: 1, min_time_s: 0, max_time_s: {max_time_s},
                 rounds: {rounds}}}
    models:
      - name: m
        source: {model}
        inputs: {{x: {{shape: [1, 3, 16, 16]}}}}
    """,
    )


def test_max_time_s_bounds_the_rounds(tmp_path, workdir):
    clock = TickingClock()
    suite = _fast_rounds_suite(tmp_path, rounds=200, max_time_s=2)
    doc, code = run_suite(suite, RunOptions(workdir=workdir, track=False, clock=clock))
    (r,) = doc["results"]
    assert code == 0, r.get("error")
    done = r["measurement"]["rounds"]
    assert 1 <= done < 200, done
    assert r["measurement"]["stopped_by"] == "max_time_s"
    assert any(
        w.startswith(f"stopped at max_time_s=2s after {done} of 200 rounds")
        for w in r["preflight"]["warnings"]
    ), r["preflight"]["warnings"]
    # The whole run's clock (rounds, and everything else that read it) passed the bound.
    assert clock.t >= 2.0


def test_rounds_within_max_time_s_all_run(tmp_path, workdir):
    suite = _fast_rounds_suite(tmp_path, rounds=4, max_time_s=60)
    doc, code = run_suite(suite, RunOptions(workdir=workdir, track=False, clock=TickingClock()))
    (r,) = doc["results"]
    assert code == 0 and r["measurement"]["rounds"] == 4
    assert r["measurement"]["stopped_by"] != "max_time_s"
    assert not any("max_time_s" in w for w in r["preflight"]["warnings"])
