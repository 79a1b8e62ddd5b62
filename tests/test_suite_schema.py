"""``guard schema suite``: the JSON Schema is generated from the validator's own tables,
every shipped suite validates against it, and it catches what an editor should flag."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import jsonschema
import pytest
import yaml

from guard.suite import blocks
from guard.suite.schema import CHECK_TYPES, suite_schema, typed_keys

ROOT = Path(__file__).resolve().parents[1]
SUITES = sorted((ROOT / "suites").glob("*.yaml"))


@pytest.fixture(scope="module")
def validator():
    schema = suite_schema()
    jsonschema.Draft202012Validator.check_schema(schema)
    return jsonschema.Draft202012Validator(schema)


def test_command_prints_the_schema():
    out = subprocess.run(
        [sys.executable, "-m", "guard.cli.main", "schema", "suite"],
        capture_output=True, text=True, check=True, cwd=ROOT,
    )  # fmt: skip
    assert json.loads(out.stdout) == suite_schema()


@pytest.mark.parametrize("path", SUITES, ids=[p.name for p in SUITES])
def test_every_shipped_suite_validates(validator, path):
    errors = sorted(validator.iter_errors(yaml.safe_load(path.read_text())), key=str)
    assert not errors, [f"{list(e.absolute_path)}: {e.message}" for e in errors]


def test_check_jsonschema_cli_validates_the_suites(tmp_path):
    """The same with check-jsonschema, as a pre-commit hook or CI step would run it."""
    cli = Path(sys.executable).with_name("check-jsonschema")
    if not cli.exists():
        pytest.skip("check-jsonschema is not installed (pip install -e '.[test]')")
    schema = tmp_path / "suite.schema.json"
    schema.write_text(json.dumps(suite_schema()))
    out = subprocess.run([str(cli), "--schemafile", str(schema), *map(str, SUITES)],
                         capture_output=True, text=True)  # fmt: skip
    assert out.returncode == 0, out.stdout + out.stderr


def test_every_key_the_validator_knows_has_a_type():
    """A key added to guard.suite.blocks without a type here is flagged (it would be
    accepted with any value)."""
    keys = blocks.TOP_KEYS | blocks.DEFAULT_KEYS | blocks.MODEL_KEYS
    assert keys - typed_keys() - {"defaults", "models"} == set()
    check_keys = set().union(*blocks.CHECK_KEYS.values())
    assert check_keys - set(CHECK_TYPES) == set()


@pytest.mark.parametrize(
    "doc, where",
    [
        ({"schema_version": 1, "suite": "s", "models": [{"name": "m", "source": "zoo:mlp",
          "treads": 2}]}, ["models", 0]),  # a typo of threads
        ({"schema_version": 1, "suite": "s", "defaults": {"checks": {"partitions": {}}},
          "models": [{"name": "m", "source": "zoo:mlp"}]}, ["defaults", "checks", "partitions"]),
        ({"schema_version": 2, "suite": "s", "models": [{"name": "m", "source": "zoo:mlp"}]},
         ["schema_version"]),
        ({"schema_version": 1, "suite": "s", "models": [{"name": "m", "source": "zoo:mlp",
          "inputs": {"x": {"dist": "gaussian"}}}]}, ["models", 0, "inputs", "x", "dist"]),
        ({"schema_version": 1, "suite": "s", "defaults": {"measure": {"rounds": 0}},
          "models": [{"name": "m", "source": "zoo:mlp"}]}, ["defaults", "measure", "rounds"]),
    ],
)  # fmt: skip
def test_schema_flags_what_the_validator_refuses(validator, doc, where, tmp_path):
    from guard.core.errors import SuiteError
    from guard.suite import load_suite

    errors = list(validator.iter_errors(doc))
    assert any(list(e.absolute_path)[: len(where)] == where for e in errors), [
        (list(e.absolute_path), e.message) for e in errors
    ]
    path = tmp_path / "s.yaml"
    path.write_text(yaml.safe_dump(doc))
    with pytest.raises(SuiteError):
        load_suite(path)
