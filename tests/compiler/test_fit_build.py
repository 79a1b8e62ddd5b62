"""``options.bundled.memory_budget``: validated at suite load (exit 2 naming the key), and
the bundled build pins the budget and the rung and reports the ladder as memory.budget."""

from __future__ import annotations

from pathlib import Path

import pytest

from guard.backends.base import BuildRequest
from guard.backends.bundled import BundledBackend
from guard.core.errors import SuiteError
from guard.manifest.target_string import canonicalize
from guard.suite.read import load_suite
from guard.zoo.cache import model_path

SUITE = """schema_version: 1
suite: budget
defaults:
  backends: [bundled]
  options: {{bundled: {{memory_budget: {value}}}}}
models:
  - name: inception_block
    source: zoo:inception_block
"""


@pytest.mark.parametrize("value", ["0", "-2MiB", "2TB", "'two'"])
def test_bad_budget_in_a_suite_is_exit_2_naming_the_key(tmp_path, value):
    p = tmp_path / "s.yaml"
    p.write_text(SUITE.format(value=value))
    with pytest.raises(SuiteError, match=r"defaults\.options\.bundled\.memory_budget") as e:
        load_suite(p)
    assert e.value.exit_code == 2


def test_good_budget_loads(tmp_path):
    p = tmp_path / "s.yaml"
    p.write_text(SUITE.format(value="2MiB"))
    assert load_suite(p)


def test_build_pins_the_budget_and_reports_the_ladder(tmp_path: Path):
    out = tmp_path / "art"
    out.mkdir()
    req = BuildRequest(
        model_path=model_path("inception_block"),
        input_shapes={"x": (1, 192, 28, 28)},
        target_raw="host",
        target_canonical=canonicalize("host"),
        threads=1,
        out_dir=out,
        options={"memory_budget": "8MiB"},  # fits at rung 1: one build, nothing to time
    )
    info = BundledBackend().build(req)
    assert info.compiler["memory_budget"] == {"bytes": 8 * 2**20, "rung": 1}
    mem = BundledBackend().load(out, 1).memory()
    budget = mem.extra["budget"]
    assert budget["fits"] and budget["rung"] == 1 and budget["ladder"][0]["name"] == "views"
    assert budget["ladder"][0]["arena_bytes"] == mem.arena_bytes


def test_unknown_budget_unit_at_build_names_the_key(tmp_path: Path):
    from guard.core.errors import UsageError

    req = BuildRequest(
        model_path=model_path("inception_block"),
        input_shapes={"x": (1, 192, 28, 28)},
        target_raw="host",
        target_canonical=canonicalize("host"),
        threads=1,
        out_dir=tmp_path,
        options={"memory_budget": "2 parsecs"},
    )
    with pytest.raises(UsageError, match="options.bundled.memory_budget"):
        BundledBackend().build(req)


CAL_SUITE = """schema_version: 1
suite: budget
defaults:
  backends: [bundled]
  options: {{bundled: {{memory_budget: 1MiB, calibration: {value}}}}}
models:
  - name: inception_block
    source: zoo:inception_block
"""


@pytest.mark.parametrize("value", ["missing.npz", "''", "3", "[a.npz]"])
def test_bad_calibration_in_a_suite_is_exit_2_naming_the_key(tmp_path, value):
    p = tmp_path / "s.yaml"
    p.write_text(CAL_SUITE.format(value=value))
    with pytest.raises(SuiteError, match=r"defaults\.options\.bundled\.calibration") as e:
        load_suite(p)
    assert e.value.exit_code == 2


def test_calibration_is_relative_to_the_suite(tmp_path):
    import numpy as np

    np.savez(tmp_path / "calib.npz", x=np.zeros((2, 1, 192, 28, 28), np.float32))
    p = tmp_path / "s.yaml"
    p.write_text(CAL_SUITE.format(value="calib.npz"))
    entry = load_suite(p).models[0]
    assert entry.options["bundled"]["calibration"] == str((tmp_path / "calib.npz").resolve())


def _request(out: Path, options: dict) -> BuildRequest:
    return BuildRequest(
        model_path=model_path("inception_block"),
        input_shapes={"x": (1, 192, 28, 28)},
        target_raw="host",
        target_canonical=canonicalize("host"),
        threads=1,
        out_dir=out,
        options=options,
    )


def test_missing_calibration_at_build_names_the_key(tmp_path: Path):
    from guard.core.errors import UsageError

    req = _request(tmp_path, {"memory_budget": "1MiB", "calibration": str(tmp_path / "no.npz")})
    with pytest.raises(UsageError, match="options.bundled.calibration"):
        BundledBackend().build(req)


def test_build_fits_at_the_int8_rung_with_its_error(tmp_path: Path):
    import numpy as np

    data = tmp_path / "calib.npz"
    rng = np.random.default_rng(0)
    np.savez(data, x=rng.standard_normal((2, 1, 192, 28, 28)).astype(np.float32))
    out = tmp_path / "art"
    out.mkdir()
    # inception_block: fp32 at best 1.53 MiB (schedule), int8 about 1 MiB
    info = BundledBackend().build(
        _request(out, {"memory_budget": "1.2MiB", "calibration": str(data)})
    )
    assert info.compiler["memory_budget"]["rung"] == 5
    mem = BundledBackend().load(out, 1).memory()
    budget = mem.extra["budget"]
    int8 = budget["ladder"][-1]
    assert budget["fits"] and int8["name"] == "int8" and int8["quantised"]
    assert int8["what"].startswith("calibrated on calib.npz (2 samples)")
    assert int8["arena_bytes"] == mem.arena_bytes <= 1.2 * 2**20
    assert int8["max_abs_err"] > 0 and int8["max_rel_err"] is not None
