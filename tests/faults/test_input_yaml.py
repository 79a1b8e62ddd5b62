"""Suite YAML a user writes by hand: duplicate keys, YAML 1.2 floats, names with a newline."""

from __future__ import annotations

from pathlib import Path

import pytest

from guard.core.errors import SuiteError
from guard.suite import load_suite

BASE = """schema_version: 1
suite: s
defaults:
  backends: [onnxruntime]
  {d}
models:
  - name: m
    source: m.onnx
    {m}
"""


def suite(tmp_path: Path, d: str = "", m: str = "", text: str | None = None) -> Path:
    p = tmp_path / "s.yaml"
    p.write_text(text if text is not None else BASE.format(d=d, m=m))
    return p


@pytest.mark.parametrize(
    ("text", "line", "key"),
    [
        # the last `suite:` used to win silently
        (
            "schema_version: 1\nsuite: a\nsuite: b\nmodels: [{name: m, source: m.onnx}]\n",
            3,
            "suite",
        ),
        (BASE.format(d="threads: 1\n  threads: 2", m=""), 6, "threads"),
        (BASE.format(d="", m="source: other.onnx"), 9, "source"),
        (BASE.format(d="checks: {tolerance: {rtol: 0.1, rtol: 0.2}}", m=""), 5, "rtol"),
    ],
)
def test_a_duplicate_key_is_refused_with_its_line(tmp_path, text, line, key):
    with pytest.raises(SuiteError) as info:
        load_suite(suite(tmp_path, text=text))
    msg = str(info.value)
    assert f"line {line}, column" in msg and f"duplicate key {key!r}" in msg, msg
    assert "\n" not in msg


def test_a_merge_key_may_still_override(tmp_path):
    # `<<: *base` then an explicit key is YAML's override, not a duplicate.
    text = BASE.format(
        d="measure: &m {warmup_s: 0.5, min_iters: 3}\n  checks: {}",
        m="measure: {<<: *m, min_iters: 5}",
    )
    s = load_suite(suite(tmp_path, text=text))
    assert s.models[0].measure["min_iters"] == 5


@pytest.mark.parametrize(
    ("spelled", "value"),
    [("1e-3", 1e-3), ("1E-3", 1e-3), ("2e2", 200.0), ("+1.5e-4", 1.5e-4), ("1.0e-4", 1e-4)],
)
def test_yaml_1_2_floats_are_numbers(tmp_path, spelled, value):
    # YAML 1.1 (PyYAML) reads 1e-3 as the string '1e-3'; a user means a number.
    s = load_suite(suite(tmp_path, d=f"checks: {{tolerance: {{rtol: {spelled}, atol: 0}}}}"))
    tolerance = s.models[0].checks.tolerance
    assert tolerance is not None and tolerance.rtol == pytest.approx(value)


def test_integers_stay_integers(tmp_path):
    s = load_suite(suite(tmp_path, d="measure: {min_iters: 7}", m="inputs: {x: {shape: [1, 3]}}"))
    assert s.models[0].measure["min_iters"] == 7
    assert s.models[0].inputs["x"].shape == (1, 3)


@pytest.mark.parametrize(
    ("text", "key"),
    [
        ('schema_version: 1\nsuite: "s\\n"\nmodels: [{name: m, source: m.onnx}]\n', "suite"),
        ('schema_version: 1\nsuite: s\nmodels: [{name: "m\\n", source: m.onnx}]\n', "name"),
    ],
)
def test_a_name_with_a_trailing_newline_is_refused(tmp_path, text, key):
    # A newline in a name splits every report line and MLflow tag that shows it.
    with pytest.raises(SuiteError) as info:
        load_suite(suite(tmp_path, text=text))
    assert key in str(info.value) and "name" in str(info.value)
