"""Noise calibration with a fake clock: the callable 'takes' jittered time by advancing it."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest

from guard.core.errors import UsageError
from guard.stats import calibrate as K


class Clock:
    def __init__(self):
        self.t = 0.0

    def __call__(self):
        return self.t


def jittered(clock, rng, sigma, ms=1.0):
    def fn():
        clock.t += ms * math.exp(rng.normal(0, sigma)) / 1000.0

    return fn


def test_noise_pct_is_robust_and_one_sided_99():
    rng = np.random.default_rng(0)
    ratios = np.exp(rng.normal(0, 0.02, 5000))
    assert K.noise_pct(ratios) == pytest.approx(100 * 2.326 * 0.02, rel=0.05)
    with_outlier = list(ratios[:50]) + [3.0]
    assert K.noise_pct(with_outlier) < 10  # one 3x outlier does not blow it up
    assert K.noise_pct([1.0, 1.0, 1.0]) == 0.0
    assert K.noise_pct([1.05] * 5) == pytest.approx(100 * math.log(1.05))  # a bias counts
    with pytest.raises(UsageError):
        K.noise_pct([1.0, 1.0])


def test_noisier_callable_gets_more_noise():
    quiet, noisy = Clock(), Clock()
    rng = np.random.default_rng(1)
    a = K.calibrate_fn(
        jittered(quiet, rng, 0.01), rounds=10, round_s=0.3, warmup_s=0.01, clock=quiet
    )
    b = K.calibrate_fn(
        jittered(noisy, rng, 0.2), rounds=10, round_s=0.3, warmup_s=0.01, clock=noisy
    )
    assert a["noise_pct"] < b["noise_pct"]
    assert len(a["sequential_ratios"]) == len(a["paired_ratios"]) == 10
    assert a["noise_pct"] < 2.0


def test_round_lasts_round_s():
    clock, rng = Clock(), np.random.default_rng(2)
    K.aa_round(jittered(clock, rng, 0.0), 0.3, clock)
    assert 0.3 <= clock.t < 0.31


def test_argument_checks():
    with pytest.raises(UsageError, match="rounds"):
        K.calibrate_fn(lambda: None, rounds=2)
    with pytest.raises(UsageError, match="round-s"):
        K.calibrate_fn(lambda: None, rounds=5, round_s=0)


def test_noise_file_roundtrip_and_validation(tmp_path):
    p = K.default_noise_path(tmp_path, "smoke")
    K.save_noise(p, "smoke", {"mlp/onnxruntime/llvm": {"noise_pct": 4.0, "paired_noise_pct": 1.5}})
    assert K.load_noise(p) == {"mlp/onnxruntime/llvm": 4.0}
    assert K.load_noise(p, "paired") == {"mlp/onnxruntime/llvm": 1.5}
    doc = json.loads(p.read_text())
    assert doc["schema_version"] == 1 and doc["suite"] == "smoke"
    doc["schema_version"] = 9
    p.write_text(json.dumps(doc))
    with pytest.raises(UsageError, match="schema_version"):
        K.load_noise(p)
    doc["schema_version"] = 1
    doc["entries"]["mlp/onnxruntime/llvm"]["noise_pct"] = "high"
    p.write_text(json.dumps(doc))
    with pytest.raises(UsageError, match=r"entries\.mlp/onnxruntime/llvm\.noise_pct"):
        K.load_noise(p)
    with pytest.raises(UsageError, match="guard calibrate"):
        K.load_noise(tmp_path / "missing.json")


def _h(text: str) -> str:
    import hashlib

    return hashlib.sha256(text.encode()).hexdigest()[:10]


# This host's canonical target (AVX-512): 330 characters, more than MLflow's 250 for a key.
LONG_TARGET = "llvm -mtriple=x86_64-unknown-linux-gnu -mcpu=znver4 -mattr=" + ",".join(
    f"+feature{i}" for i in range(30)
)


@pytest.mark.slow
def test_log_noise_with_a_long_canonical_target(tmp_path):
    """A 330-character target made the metric name illegal, and the run stayed RUNNING."""
    import mlflow

    uri = f"sqlite:///{tmp_path / 'm.db'}"
    key = f"mlp/onnxruntime/{LONG_TARGET}"
    assert len(key) > 250
    doc = K.save_noise(
        tmp_path / "n.json", "smoke", {key: {"noise_pct": 4.0, "paired_noise_pct": 1.5}}
    )
    run = mlflow.MlflowClient(tracking_uri=uri).get_run(K.log_noise(uri, "smoke", doc))
    assert run.info.status == "FINISHED"
    assert all(len(k) <= 250 for k in run.data.metrics)
    assert key in run.data.params.values()  # the full key, as a param
    assert K.latest_noise(uri, "smoke") == {key: 4.0}


@pytest.mark.slow
def test_log_noise_never_leaves_a_run_running(tmp_path, monkeypatch):
    import mlflow

    from guard.core.errors import TrackingError

    uri = f"sqlite:///{tmp_path / 'm.db'}"
    doc = K.save_noise(
        tmp_path / "n.json", "smoke", {"a/b/host": {"noise_pct": 1.0, "paired_noise_pct": 1.0}}
    )

    def broken(self, *a, **k):
        raise mlflow.exceptions.MlflowException("disk full")

    monkeypatch.setattr(mlflow.MlflowClient, "log_dict", broken)
    with pytest.raises(TrackingError, match="disk full"):
        K.log_noise(uri, "smoke", doc)
    runs = mlflow.MlflowClient(tracking_uri=uri).search_runs(["1"])
    assert [r.info.status for r in runs] == ["FAILED"]


@pytest.mark.slow
def test_log_noise_writes_one_calibration_run(tmp_path):
    pytest.importorskip("mlflow")
    import mlflow

    uri = f"sqlite:///{tmp_path / 'm.db'}"
    doc = K.save_noise(
        tmp_path / "n.json",
        "smoke",
        {"mlp/onnxruntime/llvm -mcpu=x": {"noise_pct": 4.0, "paired_noise_pct": 1.5}},
    )
    run_id = K.log_noise(uri, "smoke", doc)
    run = mlflow.MlflowClient(tracking_uri=uri).get_run(run_id)
    assert run.data.tags["guard.level"] == "calibration"
    assert run.data.metrics["noise_pct/mlp.onnxruntime.llvm_-mcpu_x-" + _h("llvm -mcpu=x")] == 4.0
    # and compare finds it there when no local noise file exists
    assert K.latest_noise(uri, "smoke") == {"mlp/onnxruntime/llvm -mcpu=x": 4.0}
    assert K.latest_noise(uri, "smoke", "paired") == {"mlp/onnxruntime/llvm -mcpu=x": 1.5}
    assert K.latest_noise(uri, "other-suite") is None


def test_reload_brings_load_to_load_differences_into_the_noise():
    """Each fresh load is off by up to +-6% (memory placement); one load with itself is not."""
    clock, rng = Clock(), np.random.default_rng(3)
    loads = iter(np.exp(rng.normal(0, 0.04, 100)))
    fn = jittered(clock, rng, 0.005)

    def reload():
        return jittered(clock, rng, 0.005, ms=float(next(loads)))

    same = K.calibrate_fn(fn, rounds=12, round_s=0.3, warmup_s=0.01, clock=clock)
    fresh = K.calibrate_fn(fn, rounds=12, round_s=0.3, warmup_s=0.01, clock=clock, reload=reload)
    assert same["noise_pct"] < 1.5 < 4 < fresh["noise_pct"]
    assert fresh["paired_noise_pct"] > 4 and fresh["reloaded"] is True
