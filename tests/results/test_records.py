"""The typed results tree (guard.results) is lossless: reading a results or comparison
document and writing it back gives the same JSON, byte for byte, key order and unknown keys
included, over every such fixture in tests/, the stored results files in benchmarks/, and
documents hypothesis generates from the records' own field types (well-typed values,
wrongly typed ones, unknown keys, keys in any order). Its typed fields read what the JSON
says, and a malformed value reads as the field's default, never an exception."""

from __future__ import annotations

import dataclasses
import importlib.util
import json
import math
import sys
import types
import typing
from pathlib import Path
from typing import Any, Literal, Union

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from guard.core.errors import SchemaError
from guard.results.documents import ComparisonDocument, ResultsDocument
from guard.results.load import read_comparison, read_results
from guard.results.manifest import Manifest
from guard.results.record import Record
from guard.results.result import Result

TESTS = Path(__file__).resolve().parents[1]
ROOT = TESTS.parent


def _fixture_module(rel: str) -> types.ModuleType:
    """A fixture module of another test folder (they import each other by bare name)."""
    path = TESTS / rel
    name = f"_records_{path.stem}"
    if name not in sys.modules:
        spec = importlib.util.spec_from_file_location(name, path)
        assert spec is not None and spec.loader is not None
        module = importlib.util.module_from_spec(spec)
        sys.modules[name] = module
        spec.loader.exec_module(module)
    return sys.modules[name]


def _dumps(doc: Any) -> str:
    """JSON as guard writes it (guard.core.fsutil / guard.report.json_report: indent 2)."""
    return json.dumps(doc, indent=2)


def _results_fixtures() -> dict[str, dict[str, Any]]:
    cf = _fixture_module("compare/compare_fixtures.py")
    td = _fixture_module("track/track_docs.py")
    rc = _fixture_module("report/conftest.py")
    rng = np.random.default_rng(0)
    docs = {
        "compare_fixtures": cf.doc(
            cf.result("a", cf.lat(rng)),
            cf.result("b", cf.lat(rng, n=3), backend="bundled", latency_ms=None),
            cf.result("c", cf.lat(rng), manifest=None, counted={"error": "x"}),
        ),
        "track_docs": td.make_doc(),
        "report_conftest": rc.make_doc(),
    }
    for path in sorted((ROOT / "benchmarks" / "results").glob("*.json")):
        doc = json.loads(path.read_text())
        if isinstance(doc, dict) and doc.get("schema_version") == 1 and "results" in doc:
            docs[path.name] = doc
    return docs


def _comparison_fixtures() -> dict[str, dict[str, Any]]:
    from guard.compare.compare import compare_docs

    cf = _fixture_module("compare/compare_fixtures.py")
    rng = np.random.default_rng(1)
    base = cf.doc(cf.result("a", cf.lat(rng)), cf.result("b", cf.lat(rng)))
    head = cf.doc(
        cf.result("a", cf.lat(rng, factor=1.2)),
        cf.result("b", cf.lat(rng), manifest=cf.manifest(compiler__version="1.33.0")),
        cf.result("c", cf.lat(rng)),
    )
    no_rounds = cf.doc(cf.result("a", cf.lat(rng, n=3)))
    return {
        "regressed": compare_docs(*map(ResultsDocument.from_json, (base, head))),
        "without_rounds": compare_docs(*map(ResultsDocument.from_json, (no_rounds, no_rounds))),
    }


RESULTS = _results_fixtures()
COMPARISONS = _comparison_fixtures()


def test_the_fixtures_cover_the_stored_run_and_every_writer():
    assert "history_template.json" in RESULTS  # a real `guard run --json` of the default suite
    assert {"compare_fixtures", "track_docs", "report_conftest"} <= set(RESULTS)


@pytest.mark.parametrize("name", sorted(RESULTS))
def test_every_results_fixture_round_trips_byte_for_byte(name: str, tmp_path: Path):
    doc = RESULTS[name]
    typed = ResultsDocument.from_json(json.loads(_dumps(doc)))
    assert _dumps(typed.to_json()) == _dumps(doc)
    for raw, r in zip(doc["results"], typed.results, strict=True):
        assert _dumps(r.to_json()) == _dumps(raw)
        assert r.model == raw["model"] and r.verdict == raw["verdict"]
        canonical = ((raw.get("manifest") or {}).get("target") or {}).get("canonical")
        assert r.canonical_target == (canonical or raw["target"])
    path = tmp_path / "r.json"
    path.write_text(_dumps(doc))
    assert _dumps(read_results(path).to_json()) == _dumps(doc)


@pytest.mark.parametrize("name", sorted(COMPARISONS))
def test_every_comparison_fixture_round_trips_byte_for_byte(name: str, tmp_path: Path):
    doc = json.loads(_dumps(COMPARISONS[name]))  # NaN ratios survive as NaN
    typed = ComparisonDocument.from_json(doc)
    assert _dumps(typed.to_json()) == _dumps(doc)
    assert [r.verdict for r in typed.rows] == [r["verdict"] for r in doc["rows"]]
    path = tmp_path / "c.json"
    path.write_text(_dumps(doc))
    assert _dumps(read_comparison(path).to_json()) == _dumps(doc)


def test_the_loaders_refuse_a_newer_schema_version(tmp_path: Path):
    newer = {**RESULTS["compare_fixtures"], "schema_version": 2}
    (tmp_path / "r.json").write_text(json.dumps(newer))
    with pytest.raises(SchemaError, match="schema_version: unsupported version 2") as e:
        read_results(tmp_path / "r.json")
    assert e.value.exit_code == 2
    newer_cmp = {**COMPARISONS["regressed"], "schema_version": 2}
    (tmp_path / "c.json").write_text(json.dumps(newer_cmp))
    with pytest.raises(SchemaError, match="this guard reads comparison schema_version 1"):
        read_comparison(tmp_path / "c.json")


# ---------------------------------------------------------------------------- generated

_junk = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=6),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=4), inner),
    max_leaves=6,
)


def _well_typed(hint: Any, depth: int) -> st.SearchStrategy[Any]:
    """A JSON value a field typed ``hint`` takes."""
    origin, args = typing.get_origin(hint), typing.get_args(hint)
    if origin in (Union, types.UnionType):
        return st.one_of([_well_typed(a, depth) for a in args])
    if hint is type(None):
        return st.none()
    if hint is Any:
        return _junk
    if origin is Literal:
        return st.sampled_from(args)
    if hint is bool:
        return st.booleans()
    if hint is int:
        return st.integers(-(2**40), 2**40)
    if hint is float:
        return st.floats(allow_nan=False) | st.integers(-(2**20), 2**20)
    if hint is str:
        return st.text(max_size=8)
    if isinstance(hint, type) and issubclass(hint, Record):
        return _objects(hint, depth + 1)
    if origin is tuple:
        return st.lists(_well_typed(args[0], depth + 1), max_size=3 if depth < 3 else 0)
    if origin is not None and issubclass(origin, typing.Mapping):  # type: ignore[arg-type]
        return st.dictionaries(st.text(max_size=5), _well_typed(args[1], depth + 1), max_size=3)
    raise AssertionError(f"no strategy for {hint!r}")


@st.composite
def _object(draw: st.DrawFn, cls: type[Record], depth: int) -> dict[str, Any]:
    hints = typing.get_type_hints(cls)
    names = [f.name for f in dataclasses.fields(cls) if f.name != "extra"]
    keys = draw(
        st.lists(st.sampled_from(names) | st.text(min_size=1, max_size=6), unique=True, max_size=8)
    )
    out: dict[str, Any] = {}
    for k in keys:
        if k in names:  # a field (not ``_raw``, a class variable hypothesis may draw)
            # mostly well typed, sometimes null or junk (an edited or older file)
            typed = _well_typed(hints[k], depth) if depth < 4 else st.none()
            out[k] = draw(typed | st.none() | _junk)
        else:
            out[k] = draw(_junk)
    return out


def _objects(cls: type[Record], depth: int = 0) -> st.SearchStrategy[dict[str, Any]]:
    return _object(cls, depth)


_SCALARS: dict[Any, Any] = {
    str | None: str,
    int | None: int,
    float | None: (int, float),
    bool | None: bool,
}


def _same(a: Any, b: Any) -> bool:
    return a == b or (
        isinstance(a, float) and isinstance(b, float) and math.isnan(a) and math.isnan(b)
    )


@pytest.mark.parametrize("cls", [Result, Manifest, ResultsDocument, ComparisonDocument])
@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data())
def test_generated_documents_round_trip_and_read_what_they_say(cls: type[Record], data: Any):
    doc = data.draw(_objects(cls))
    text = json.dumps(doc)
    rec = cls.from_json(json.loads(text))
    assert json.dumps(rec.to_json()) == text  # byte for byte, key order included
    hints = typing.get_type_hints(cls)
    for k, v in doc.items():
        if k not in hints or k == "extra":
            assert json.dumps(rec.extra[k]) == json.dumps(v)  # passed through
            continue
        scalar = _SCALARS.get(hints[k])
        if scalar is not None:
            # a scalar of the field's type reads as itself; anything else as None
            fits = isinstance(v, scalar) and (scalar is bool or not isinstance(v, bool))
            assert _same(getattr(rec, k), v if fits else None)


@settings(max_examples=100, deadline=None)
@given(st.dictionaries(st.sampled_from(["model", "manifest", "target"]), _junk))
def test_a_malformed_result_reads_as_defaults_never_raises(doc: dict[str, Any]):
    r = Result.from_json(doc)
    assert isinstance(r.manifest.target.canonical, str | None)
    assert isinstance(r.canonical_target, str)
    assert json.dumps(r.to_json()) == json.dumps(doc)


def test_a_record_built_in_code_writes_its_fields_in_order():
    m = Manifest.from_json({"host": {"threads": 1, "arch": "x86_64"}, "zz": 1})
    built = dataclasses.replace(m, sha256="h")
    assert built.to_json() == {"host": {"threads": 1, "arch": "x86_64"}, "sha256": "h", "zz": 1}
    assert list(Result(model="m", backend="b", target="t").to_json()) == [
        "model",
        "backend",
        "target",
    ]
