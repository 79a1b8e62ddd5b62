"""Suite loading: the v1 contract, defaults and overrides, and one-line errors."""

from __future__ import annotations

from pathlib import Path

import pytest

from guard.core.errors import SuiteError
from guard.suite import load_suite
from guard.suite.check_blocks import LatencyBounds, PartitionsBound

GOOD = """
schema_version: 1
suite: demo
defaults:
  backends: [onnxruntime, bundled]
  target: host
  threads: 1
  measure: {warmup_s: 0.1, min_iters: 5, min_time_s: 0.1, max_time_s: 2}
  checks:
    tolerance: {rtol: 1.0e-4, atol: 1.0e-5}
    latency: {p50_ms: {x86_64: 150, aarch64: 300}, p90_ms: 200}
models:
  - name: resnet
    source: zoo:resnet50
    inputs:
      gpu_0/data_0: {shape: [1, 3, 224, 224], dist: normal, seed: 3}
  - name: local
    source: m.onnx
    backends: [onnxruntime]
    threads: 2
    inputs:
      sr: {shape: [], dist: const, value: 16000}
      ids: {shape: [1, 8], dist: uniform, low: 0, high: 100}
    checks:
      latency: {p50_ms: 10}
      tolerance: null
      partitions: {max: 1}
"""


def write(tmp_path: Path, text: str, name: str = "s.yaml") -> Path:
    p = tmp_path / name
    p.write_text(text)
    return p


def test_good_suite_applies_defaults_and_overrides(tmp_path):
    s = load_suite(write(tmp_path, GOOD))
    assert s.name == "demo" and len(s.sha256) == 64
    resnet, local = s.models
    assert resnet.backends == ("onnxruntime", "bundled")
    assert resnet.measure["min_iters"] == 5 and resnet.measure["max_time_s"] == 2
    assert resnet.checks.latency is not None
    assert resnet.checks.latency.p50_ms == {"x86_64": 150.0, "aarch64": 300.0}
    assert resnet.inputs["gpu_0/data_0"].shape == (1, 3, 224, 224)
    assert resnet.inputs["gpu_0/data_0"].seed == 3
    assert local.backends == ("onnxruntime",) and local.threads == 2
    # latency block merged key by key over the default; tolerance switched off by null
    assert local.checks.latency == LatencyBounds(p50_ms=10.0, p90_ms=200.0)
    assert local.checks.tolerance is None and local.checks.partitions == PartitionsBound(max=1)
    assert local.source == str((tmp_path / "m.onnx").resolve())
    assert local.inputs["sr"].shape == () and local.inputs["sr"].params == {"value": 16000.0}


@pytest.mark.parametrize(
    ("text", "needle"),
    [
        (
            "schema_version: 1\nsuite: x\nmodels: [{name: a, sorce: zoo:mlp}]",
            "models[0].sorce: unknown key. Did you mean 'source'?",
        ),
        (
            "schema_version: 2\nsuite: x\nmodels: [{name: a, source: zoo:mlp}]",
            "schema_version: unsupported version 2",
        ),
        ("suite: x\nmodels: [{name: a, source: zoo:mlp}]", "schema_version: missing"),
        ("schema_version: 1\nsuite: x\nmodels: []", "models: expected a non-empty list"),
        (
            "schema_version: 1\nsuite: x\ndefaults: {mesure: {}}\nmodels: [{name: a, source: zoo:mlp}]",
            "defaults.mesure: unknown key. Did you mean 'measure'?",
        ),
        (
            "schema_version: 1\nsuite: x\nmodels: [{name: a, source: zoo:mlp, checks: {latency: {p50: 3}}}]",
            "models[0].checks.latency.p50: unknown key. Did you mean 'p50_ms'?",
        ),
        (
            "schema_version: 1\nsuite: x\nmodels: [{name: a, source: zoo:mlp, checks: {latency: {p50_ms: -1}}}]",
            "models[0].checks.latency.p50_ms: must be > 0",
        ),
        (
            "schema_version: 1\nsuite: x\nmodels: [{name: a, source: zoo:mlp, inputs: {x: {dist: gaussian}}}]",
            "models[0].inputs.x.dist: unknown distribution 'gaussian'",
        ),
        (
            "schema_version: 1\nsuite: x\nmodels: [{name: a, source: zoo:mlp, inputs: {x: {shape: [1, -3]}}}]",
            "models[0].inputs.x.shape[1]: expected a non-negative integer",
        ),
        (
            "schema_version: 1\nsuite: x\nmodels: [{name: a, source: zoo:mlp}, {name: a, source: zoo:mlp}]",
            "models[1].name: duplicate model name 'a'",
        ),
        (
            "schema_version: 1\nsuite: x\nmodels: [{name: a, source: zoo:mlp, inputs: {x: {dist: const}}}]",
            "models[0].inputs.x.value: dist 'const' needs a value",
        ),
        (
            "schema_version: 1\nsuite: x\ndefaults: {measure: {min_time_s: 5, max_time_s: 1}}\n"
            "models: [{name: a, source: zoo:mlp}]",
            "min_time_s (5.0) exceeds max_time_s",
        ),
        (
            "schema_version: 1\nsuite: x\nmodels: [{name: a, source: zoo:mlp, checks: {tuning: {min_hit_rate: 2}}}]",
            "is a fraction in [0, 1]",
        ),
        ("schema_version: 1\nsuite: x\nmodels:\n  - name: a\n   source: zoo:mlp\n", "invalid YAML"),
    ],
)
def test_bad_suites_name_file_and_key(tmp_path, text, needle):
    p = write(tmp_path, text)
    with pytest.raises(SuiteError) as ei:
        load_suite(p)
    msg = str(ei.value)
    assert needle in msg, msg
    assert str(p) in msg and "\n" not in msg
    assert ei.value.exit_code == 2


def test_missing_and_binary_suite_files(tmp_path):
    with pytest.raises(SuiteError, match="suite file not found"):
        load_suite(tmp_path / "nope.yaml")
    p = tmp_path / "bin.yaml"
    p.write_bytes(b"\xff\xfe\x00garbage")
    with pytest.raises(SuiteError, match="not a UTF-8 text file"):
        load_suite(p)
    with pytest.raises(SuiteError, match="is a directory"):
        load_suite(tmp_path)


def test_suite_hash_pins_exact_bytes(tmp_path):
    a = load_suite(write(tmp_path, GOOD, "a.yaml"))
    b = load_suite(write(tmp_path, GOOD.replace("p90_ms: 200", "p90_ms: 201"), "b.yaml"))
    assert a.sha256 != b.sha256


def test_shipped_suites_load():
    root = Path(__file__).resolve().parents[2] / "suites"
    names = sorted(p.name for p in root.glob("*.yaml"))
    assert {"default.yaml", "smoke.yaml"} <= set(names)
    for p in root.glob("*.yaml"):
        s = load_suite(p)
        assert s.models


def test_measure_keys_match_the_harness():
    import dataclasses

    from guard.measure import MeasureConfig
    from guard.suite.blocks import MEASURE_KEYS

    # counted: the counted run's block (guard.run.counted), not the timing harness's
    assert MEASURE_KEYS - {"counted"} == {f.name for f in dataclasses.fields(MeasureConfig)}


def test_a_counted_measure_block_is_validated(tmp_path):
    from guard.core.errors import UsageError
    from guard.suite import load_suite

    body = "schema_version: 1\nsuite: s\ndefaults:\n  measure: {{counted: {block}}}\n" + (
        "models:\n  - name: mlp\n    source: zoo:mlp\n"
        "    inputs:\n      x: {{shape: [1, 256], dist: normal, seed: 0}}\n"
    )
    good = tmp_path / "good.yaml"
    good.write_text(body.format(block="{inferences: 4, warmup: 0, max_s: 60}"))
    (m,) = load_suite(good).models
    assert m.measure["counted"] == {"inferences": 4, "warmup": 0, "max_s": 60}
    for bad in ("{inferences: 0}", "{inferences: 1.5}", "{bogus: 1}", "{max_s: -1}"):
        p = tmp_path / "bad.yaml"
        p.write_text(body.format(block=bad))
        with pytest.raises(UsageError) as err:
            load_suite(p)
        assert "measure.counted" in str(err.value)


def test_option_backends_match_the_registry():
    from guard.backends import REGISTRY
    from guard.suite.blocks import OPTION_BACKENDS

    assert OPTION_BACKENDS == set(REGISTRY)
