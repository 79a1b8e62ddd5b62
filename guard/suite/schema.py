"""The suite file's JSON Schema, generated from the tables the suite validator uses.

Every key set, range and name list comes from guard.suite.blocks / entries / limits (the
ones ``load_suite`` checks against), so a key added there appears here; ``TYPES`` says what
each key's value looks like, and tests/test_suite_schema.py fails when a key has no entry.
The schema is for editors (completion, hover text, a squiggle under a typo): the validator
stays the authority on what guard accepts (file paths, zoo names, LLVM target names, ranges
that depend on each other).

``guard schema suite`` prints it; the README says how to wire it into an editor. A schema
node is a ``JsonObject``: JSON Schema's keywords are open-ended (any of the draft's, in any
combination), so a node has no fixed keys.
"""

from __future__ import annotations

from guard.core.json_types import JsonObject
from guard.suite.blocks import (
    CHECK_KEYS,
    COUNTED_ENGINES,
    COUNTED_KEYS,
    COUNTED_RANGES,
    DEFAULT_KEYS,
    INPUT_KEYS,
    MEASURE_KEYS,
    MEASURE_RANGES,
    MODEL_KEYS,
    NAME_RE,
    OPTION_BACKENDS,
    REQUIRED_CHECK_KEYS,
    TOP_KEYS,
)
from guard.suite.entries import ARCHES, DISTS
from guard.suite.fields import MAX_THREADS
from guard.suite.limits import LIMIT_KEYS
from guard.suite.quantize import METHODS

SCHEMA_ID = "https://guard.invalid/schemas/suite-v1.json"
_NUMBER = {"type": "number"}
_POSITIVE = {"type": "number", "exclusiveMinimum": 0}
_NAME = {"type": "string", "pattern": NAME_RE.pattern.replace(r"\A", "^").replace(r"\Z", "$")}
_TARGET = {
    "description": 'host, native, an LLVM target string ("llvm -mtriple=aarch64-linux-gnu '
    '-mattr=+neon") or its mapping form',
    "anyOf": [{"type": "string", "minLength": 1}, {"type": "object"}],
}
_ARCH_BOUND = {
    "anyOf": [
        _POSITIVE,
        {
            "type": "object",
            "properties": {a: _POSITIVE for a in ARCHES},
            "additionalProperties": False,
        },
    ]
}


def _ranged(lo: float, hi: float, integer: bool) -> JsonObject:
    return {"type": "integer" if integer else "number", "minimum": lo, "maximum": hi}


def _closed(props: JsonObject, required: tuple[str, ...] = ()) -> JsonObject:
    out: JsonObject = {"type": "object", "properties": props, "additionalProperties": False}
    if required:
        out["required"] = list(required)
    return out


def _measure() -> JsonObject:
    counted = {k: _ranged(*COUNTED_RANGES[k]) for k in COUNTED_KEYS if k in COUNTED_RANGES}
    counted["engine"] = {"enum": list(COUNTED_ENGINES)}
    props = {k: _ranged(*MEASURE_RANGES[k]) for k in MEASURE_KEYS if k in MEASURE_RANGES}
    props["counted"] = {"anyOf": [{"type": "null"}, _closed(_only(counted, COUNTED_KEYS))]}
    return _closed(_only(props, MEASURE_KEYS))


# What the value of each check key looks like (CHECK_KEYS names the keys).
CHECK_TYPES: dict[str, JsonObject] = {
    "p50_ms": _ARCH_BOUND,
    "p90_ms": _ARCH_BOUND,
    "p99_ms": _ARCH_BOUND,
    "regress_pct": {"type": "number", "minimum": 0},
    "strict": {"type": "boolean"},
    "rtol": {"type": "number", "minimum": 0},
    "atol": {"type": "number", "minimum": 0},
    "dataset": {"type": "string", "pattern": "^zoo:"},
    "min_top1": {"type": "number", "minimum": 0, "maximum": 1},
    "limit": {"type": "integer", "minimum": 0},
    "max": {"type": "integer", "minimum": 0},
    "max_bytes": {"type": "integer", "minimum": 0},
    "min_hit_rate": {"type": "number", "minimum": 0, "maximum": 1},
    # checks.quantization and checks.int8_agreement (guard.suite.quantize)
    "min_top1_agreement": {"type": "number", "minimum": 0, "maximum": 1},
    "min_sqnr_db": _NUMBER,
    "max_top1_drop": {"type": "number", "minimum": 0, "maximum": 1},
    "across": {"type": "array", "items": _TARGET, "minItems": 2},
}


def _checks() -> JsonObject:
    props = {
        name: {
            "anyOf": [
                {"type": "null"},
                _closed(
                    {k: CHECK_TYPES.get(k, {}) for k in sorted(keys)},
                    REQUIRED_CHECK_KEYS.get(name, ()),
                ),
            ]
        }
        for name, keys in sorted(CHECK_KEYS.items())
    }
    return _closed(props)


def _input() -> JsonObject:
    props = {
        "shape": {"type": "array", "items": {"type": "integer", "minimum": 0}},
        "dist": {"enum": list(DISTS)},
        "seed": {"type": "integer", "minimum": 0},
        "mean": _NUMBER,
        "std": _NUMBER,
        "low": _NUMBER,
        "high": _NUMBER,
        "value": _NUMBER,
        "file": {"type": "string", "description": ".npy, .npz or .pb, relative to the suite"},
        "key": {"type": "string", "description": "the array of an .npz"},
    }
    return _closed(_only(props, INPUT_KEYS))


def _only(props: JsonObject, keys: set[str]) -> JsonObject:
    """``props`` for exactly ``keys`` (a key without a type accepts any value)."""
    return {k: props.get(k, {}) for k in sorted(keys)}


def _options() -> JsonObject:
    per = {"type": "object", "description": "backend options (see the README)"}
    return _closed({b: {"anyOf": [{"type": "null"}, per]} for b in sorted(OPTION_BACKENDS)})


def _types() -> dict[str, JsonObject]:
    """What the value of each top-level, defaults and model key looks like."""
    backends = {"type": "array", "items": {"type": "string"}, "minItems": 1}
    return {
        "schema_version": {"const": 1},
        "suite": {**_NAME, "description": "MLflow experiment name: guard/<suite>"},
        "description": {"type": "string"},
        "name": _NAME,
        "source": {
            "type": "string",
            "description": "zoo:<name>, or a path to an .onnx file relative to this file",
        },
        "inputs": {"type": "object", "additionalProperties": _input()},
        "backends": backends,
        "target": _TARGET,
        "targets": {"type": "array", "items": _TARGET, "minItems": 1},
        "threads": {"type": "integer", "minimum": 1, "maximum": MAX_THREADS},
        "measure": _measure(),
        "checks": _checks(),
        "profile": {"type": "string", "description": "a delegate profile name or YAML file"},
        "options": _options(),
        "build_timeout_s": _POSITIVE,
        "test_data": {"type": "string", "description": "an ONNX test_data_set_N directory"},
        "quantize": _closed(
            {
                "calibration": {
                    "type": "string",
                    "description": ".npz, a directory of .npy/.npz or test_data_set_N "
                    "directories (relative to this file), or 'inputs'",
                },
                "method": {"enum": list(METHODS)},
                "per_channel": {"type": "boolean"},
                "symmetric": {"type": "boolean"},
                "keep_fp32": {
                    "anyOf": [{"type": "string"}, {"type": "array", "items": {"type": "string"}}]
                },
            },
            ("calibration",),
        ),
        "limits": _closed(
            _only({k: {"type": "integer", "minimum": 1} for k in LIMIT_KEYS}, LIMIT_KEYS)
        ),  # fmt: skip
    }


# Keys typed above, so a test can name a key of blocks' sets that has no type here.
def typed_keys() -> set[str]:
    return set(_types())


def suite_schema() -> JsonObject:
    """The suite file's JSON Schema (draft 2020-12)."""
    types = _types()
    defaults = _closed(_only(types, DEFAULT_KEYS))
    model = _closed(_only(types, MODEL_KEYS), ("name", "source"))
    top = _only({**types, "defaults": defaults, "models": {}}, TOP_KEYS)
    top["models"] = {"type": "array", "items": model, "minItems": 1}
    return {
        "$schema": "https://json-schema.org/draft/2020-12/schema",
        "$id": SCHEMA_ID,
        "title": "guard suite file (schema_version 1)",
        "description": "A suite of models, the backends and targets they ship to, how to "
        "measure them and what to check. Generated by `guard schema suite`.",
        **_closed(top, ("schema_version", "suite", "models")),
    }
