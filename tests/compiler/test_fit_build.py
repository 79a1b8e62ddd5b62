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
