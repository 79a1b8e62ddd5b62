"""Reading guard's versioned documents: one error type, naming the file and the field.

Everything guard persists carries ``schema_version`` (suites, results, manifests, goldens,
tuning caches, ...) and is validated when it is read back. This module is what the readers
share for that (suites, results, comparisons, manifests, goldens, delegate profiles, the
bundled tuning cache and the onnxruntime and tvm artefact records read through it): a
:class:`Schema` says which version of a kind of document this guard reads and what a user
should do with a file of another version; :func:`read_json` reads a bounded
JSON file; :class:`At` is a position in a document (the file and a dotted field such as
``results[0].rounds``) that checks a value's type and builds the error. Every failure is
one :class:`~guard.core.errors.SchemaError` (exit 2) reading ``FILE: FIELD: what is wrong``,
with a hint when the fix is not obvious; a caller that has its own error subclass (a
suite's ``SuiteError``, a manifest's ``ManifestError``) passes it as ``error``.

What a field must contain beyond its type (a latency is a finite positive number, a
manifest section holds its pins) stays with the code that owns the contract; this module
only gives it the position and the error.
"""

from __future__ import annotations

import json
import reprlib
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from guard.core.errors import SchemaError
from guard.core.fsutil import MAX_DOCUMENT_BYTES, BoundedReadError, read_bounded_text
from guard.core.json_types import Json, JsonObject

# The results file (``guard run --json``, docs/ARCHITECTURE.md): written by guard.run.runner,
# read by guard.compare, guard.run.merge and guard.track, all of which take the version here.
RESULTS_SCHEMA_VERSION = 1

_REPR = reprlib.Repr()
_REPR.maxlevel, _REPR.maxlist, _REPR.maxtuple, _REPR.maxdict = 2, 4, 4, 4
_REPR.maxstring, _REPR.maxother, _REPR.maxlong = 40, 40, 40


def show(value: Any) -> str:
    """A short repr for messages: a huge or nested value is never shown in full."""
    text = _REPR.repr(value)
    return text if len(text) <= 80 else text[:77] + "..."


def _type_name(value: Any) -> str:
    if value is None:
        return "null"
    return {dict: "an object", list: "a list", str: "a string", bool: "a boolean"}.get(
        type(value), type(value).__name__
    )


def section(tree: Any, key: str) -> Mapping[str, Json]:
    """``tree[key]`` when both are mappings, else an empty one: for readers that take a
    document as it comes (tracking, merging), where a missing or malformed block is empty."""
    value = tree.get(key) if isinstance(tree, Mapping) else None
    return value if isinstance(value, Mapping) else {}


@dataclass(frozen=True)
class At:
    """A position in a document: the file (or ``run:<id>``) and the dotted field."""

    file: str
    field: str = ""
    error: type[SchemaError] = SchemaError

    def key(self, name: str) -> At:
        return At(self.file, f"{self.field}.{name}" if self.field else name, self.error)

    def item(self, index: int) -> At:
        return At(self.file, f"{self.field}[{index}]", self.error)

    def fail(self, message: str, hint: str | None = None) -> SchemaError:
        """The error to raise for this position (``FILE: FIELD: message``)."""
        return self.error(message, where=self.file, field=self.field or None, hint=hint)

    def mapping(self, value: Any, what: str = "an object") -> JsonObject:
        if not isinstance(value, dict):
            raise self.fail(f"expected {what}, got {_type_name(value)}")
        return value

    def objects(self, value: Any) -> list[JsonObject]:
        """A list whose items are all objects; the first other item is named by index."""
        if not isinstance(value, list):
            raise self.fail(f"expected a list of objects, got {_type_name(value)}")
        for i, item in enumerate(value):
            self.item(i).mapping(item)
        return value

    def name(self, value: Any) -> str:
        """A non-empty string."""
        if not isinstance(value, str) or not value:
            raise self.fail(f"expected a non-empty name, got {show(value)}")
        return value


@dataclass(frozen=True)
class Schema:
    """One kind of versioned document and the version of it this guard reads.

    ``hint`` says what to do with a file of another version (re-run, rebuild, upgrade).
    With ``up_to``, every version from 1 to ``version`` is read (a cache whose older
    layouts still load); otherwise exactly ``version``.
    """

    kind: str  # "results", "manifest", "suite", ... as the messages name it
    version: int
    hint: str
    up_to: bool = False
    error: type[SchemaError] = SchemaError

    def at(self, file: str | Path) -> At:
        return At(str(file), "", self.error)

    def check(self, doc: Any, file: str | Path) -> JsonObject:
        """``doc`` as a dict when it is an object of a version this guard reads."""
        at = self.at(file)
        if not isinstance(doc, dict):
            raise at.fail(
                f"not a JSON object ({_type_name(doc)}), so not a {self.kind} document",
                self.hint,
            )
        self.check_version(doc, at)
        return doc

    def check_version(self, doc: Mapping[str, Json], at: At) -> int:
        field = at.key("schema_version")
        if "schema_version" not in doc:
            raise field.fail(f"missing (this guard reads {self.kind} {self._reads()})", self.hint)
        version = doc["schema_version"]
        ok = isinstance(version, int) and not isinstance(version, bool)
        if ok and (1 <= version <= self.version if self.up_to else version == self.version):
            return int(version)
        raise field.fail(
            f"unsupported version {show(version)} (this guard reads {self.kind} {self._reads()})",
            self.hint,
        )

    def _reads(self) -> str:
        if self.up_to and self.version > 1:
            return f"schema_version 1 to {self.version}"
        return f"schema_version {self.version}"

    def load(
        self,
        path: str | Path,
        *,
        what: str | None = None,
        missing_hint: str | None = None,
        limit: int = MAX_DOCUMENT_BYTES,
    ) -> JsonObject:
        """Read ``path`` (:func:`read_json`) and :meth:`check` it."""
        doc = read_json(
            path,
            what=what or f"{self.kind} file",
            hint=missing_hint or self.hint,
            error=self.error,
            limit=limit,
        )
        return self.check(doc, path)


def read_json(
    path: str | Path,
    *,
    what: str,
    hint: str | None = None,
    error: type[SchemaError] = SchemaError,
    limit: int = MAX_DOCUMENT_BYTES,
) -> Any:
    """The parsed JSON of a regular file under ``limit`` bytes; any failure is one line.

    ``what`` names the file in messages ("results file"); ``hint`` is added where the
    file is missing or unreadable.
    """
    p = Path(path)
    try:
        text = read_bounded_text(p, limit)
    except FileNotFoundError:
        raise error(f"{what} not found", where=str(p), hint=hint) from None
    except BoundedReadError as exc:
        raise error(exc.reason, where=str(p), hint=hint) from None
    except UnicodeDecodeError:
        raise error(f"{what} is not UTF-8 text", where=str(p), hint=hint) from None
    except OSError as exc:
        raise error(
            f"cannot read {what} ({exc.strerror or exc})", where=str(p), hint=hint
        ) from None
    try:
        return json.loads(text)
    except json.JSONDecodeError as exc:
        raise error(
            f"not valid JSON (line {exc.lineno}, column {exc.colno}): {exc.msg}",
            where=str(p),
            hint=hint,
        ) from None
    except RecursionError:
        raise error("not valid JSON: nested too deeply", where=str(p), hint=hint) from None


def results_document(
    doc: Any, file: str | Path, *, hint: str, require_suite: bool = False
) -> JsonObject:
    """A results document's frame (v1): an object of this version whose ``results`` is a
    list of objects (and, with ``require_suite``, whose ``suite`` is a name)."""
    schema = Schema("results", RESULTS_SCHEMA_VERSION, hint)
    out = schema.check(doc, file)
    at = schema.at(file)
    if require_suite:
        at.key("suite").name(out.get("suite"))
    at.key("results").objects(out.get("results"))
    return out
