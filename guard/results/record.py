"""Typed, read-only records of guard's JSON documents, read leniently and written losslessly.

Every part of a result (guard.results.result), its manifest (guard.results.manifest), its
counted block (guard.results.counted) and the results and comparison documents
(guard.results.documents) is a frozen dataclass deriving from :class:`Record`. Readers use
attributes (``r.latency_ms.p50``, ``r.manifest.target.canonical``); only this package
knows the JSON keys.

Why dataclasses and not pydantic (v2 is installed, as an mlflow dependency): a record must
give back, byte for byte, the JSON it was read from, whatever guard version wrote it. A
pydantic model coerces in lax mode (``1`` into ``1.0`` for a float field, ``"3"`` into
``3``) and dumps extra keys after the declared ones, so neither values nor key order
survive; strict mode refuses the older and edited files readers take today. A dataclass
does neither, is what mypy checks natively, and costs guard's start-up nothing.

How a record reads JSON (``Record.from_json``): each field is typed, and its JSON key is
its name. A value of the field's type is taken; anything else (absent, null, or of another
type, as an edited file may have) gives the field's default: None, an empty record, ``()``
or ``{}``, so a reader never meets a malformed block and never needs ``or {}``. A list of
records skips items that are not objects; a list of values keeps its places (an item that
does not fit is None where the item type allows None, else the list is not taken). Keys a record has no field for are kept in
``extra``. ``to_json`` gives back the very object read (a copy), so reading any file and
writing it back is lossless, key order, unknown keys and malformed values included. A record
built in code (or by ``dataclasses.replace``) writes its fields instead: in declaration
order, leaving out those at their default, then ``extra``.

Adding a field (a writer added ``quantization`` to results, ``budget`` to ``memory``):
add a typed field with a default to the record that holds it, named as its JSON key (a
new object gets its own ``Record`` subclass, in the module of its concern, as
``Quantization`` and ``WorstTensor`` are), using only the shapes ``_reader`` knows (str,
int, float, bool, a Literal, a Record, ``tuple[X, ...]``, ``Mapping[str, X]``, ``Json``,
each optionally ``| None``); then read it as an attribute. Nothing else: the property test
(tests/results/test_records.py) generates documents from the fields' types, files without
the key read the default, and a file written before the field existed passes through as
it always did. A reader that needs a key no record has adds it the same way rather than
reading ``extra`` (tests/results/test_no_string_keys.py keeps string reads out of the
migrated packages).
"""

from __future__ import annotations

import copy
import dataclasses
import numbers
import types
import typing
from collections.abc import Callable, Mapping
from typing import Any, ClassVar, Literal, Self, TypeAlias, Union

Json: TypeAlias = Any  # a JSON value as json.loads returns it

# A field's reader: (taken, value); not taken means the field keeps its default.
_Reader = Callable[[Any], tuple[bool, Any]]
_MISSING = object()


@dataclasses.dataclass(frozen=True, kw_only=True)
class Record:
    """A JSON object read as a frozen record: typed fields, plus ``extra`` for the keys
    no field reads (see the module docstring)."""

    extra: Mapping[str, Json] = dataclasses.field(default_factory=dict, repr=False)

    # The object this record was read from (unset for one built in code).
    _raw: ClassVar[Any] = _MISSING

    @classmethod
    def from_json(cls, value: Json) -> Self:
        """The record of a JSON object (a non-object gives the empty record)."""
        if not isinstance(value, Mapping):
            return cls()
        kwargs: dict[str, Any] = {}
        readers = _readers(typing.cast(type[Record], cls))
        for key, v in value.items():
            reader = readers.get(key)
            if reader is None:
                continue
            taken, parsed = reader(v)
            if taken:
                kwargs[key] = parsed
        extra = {k: v for k, v in value.items() if k not in readers}
        rec = cls(**kwargs, extra=extra)
        object.__setattr__(rec, "_raw", value)
        return rec

    @classmethod
    def of(cls, value: Self | Mapping[str, Json]) -> Self:
        """``value`` itself when it is this record already, else its record (``from_json``):
        for the entry points that take a document still as parsed JSON."""
        return value if isinstance(value, cls) else cls.from_json(value)

    def to_json(self) -> dict[str, Json]:
        """The JSON object of this record: what was read, or its fields (module docstring)."""
        if self._raw is not _MISSING:
            return typing.cast(dict[str, Json], copy.deepcopy(self._raw))
        out: dict[str, Json] = {}
        for f in dataclasses.fields(self):
            if f.name == "extra":
                continue
            value = getattr(self, f.name)
            if value != _default(f):
                out[f.name] = _write(value)
        out.update(copy.deepcopy(dict(self.extra)))
        return out

    @property
    def read(self) -> bool:
        """Whether this record was read from a JSON object (not built in code)."""
        return self._raw is not _MISSING


def _default(f: dataclasses.Field[Any]) -> Any:
    if f.default is not dataclasses.MISSING:
        return f.default
    if f.default_factory is not dataclasses.MISSING:
        return f.default_factory()
    return _MISSING


def _write(value: Any) -> Json:
    if isinstance(value, Record):
        return value.to_json()
    if isinstance(value, tuple | list):
        return [_write(v) for v in value]
    if isinstance(value, Mapping):
        return {k: _write(v) for k, v in value.items()}
    return copy.deepcopy(value)


_READERS: dict[type[Record], dict[str, _Reader]] = {}


def _readers(cls: type[Record]) -> dict[str, _Reader]:
    """Each field's reader, by JSON key (worked out once per record class)."""
    readers = _READERS.get(cls)
    if readers is None:
        hints = typing.get_type_hints(cls)
        readers = {
            f.name: _reader(hints[f.name]) for f in dataclasses.fields(cls) if f.name != "extra"
        }
        _READERS[cls] = readers
    return readers


def _reader(hint: Any) -> _Reader:
    """The reader of a field typed ``hint`` (the shapes the records use)."""
    origin, args = typing.get_origin(hint), typing.get_args(hint)
    if origin in (Union, types.UnionType):
        inner = [a for a in args if a is not type(None)]
        read = _reader(inner[0] if len(inner) == 1 else Union[tuple(inner)])  # noqa: UP007
        return lambda v: (True, None) if v is None else read(v)
    if hint is Any or hint is object:
        return lambda v: (True, v)
    if origin is Literal:
        allowed = frozenset(args)
        return lambda v: (isinstance(v, str) and v in allowed, v)
    if hint is bool:
        return lambda v: (_is_bool(v), v)
    if hint is int:
        return lambda v: (isinstance(v, numbers.Integral) and not _is_bool(v), v)
    if hint is float:
        return lambda v: (isinstance(v, numbers.Real) and not _is_bool(v), v)
    if hint is str:
        return lambda v: (isinstance(v, str), v)
    if isinstance(hint, type) and issubclass(hint, Record):
        rec = hint
        return lambda v: (isinstance(v, Mapping), rec.from_json(v))
    if origin is tuple and len(args) == 2 and args[1] is Ellipsis:
        item = _reader(args[0])
        skip = isinstance(args[0], type) and issubclass(args[0], Record)
        optional = type(None) in typing.get_args(args[0])

        def read_items(v: Any) -> tuple[bool, Any]:
            # A list of records skips what is not an object (a reader never sees it). A list
            # of values keeps its places (a [base, head] pair, the index of a sample): an
            # item that does not fit is None where the item type allows it, else the list
            # is not taken at all.
            if not isinstance(v, list | tuple):
                return False, None
            read = [item(x) for x in v]
            if skip:
                return True, tuple(p for ok, p in read if ok and isinstance(p, Record))
            if optional:
                return True, tuple(p if ok else None for ok, p in read)
            return all(ok for ok, _ in read), tuple(p for _, p in read)

        return read_items
    if origin in (Mapping, dict) or hint is dict:
        value = _reader(args[1]) if args else _reader(Any)
        of_records = bool(args) and isinstance(args[1], type) and issubclass(args[1], Record)

        def read_map(v: Any) -> tuple[bool, Any]:
            # like lists: records skip what is not an object, values are taken whole
            if not isinstance(v, Mapping):
                return False, None
            read = {k: value(x) for k, x in v.items()}
            if of_records:
                return True, {k: p for k, (ok, p) in read.items() if ok}
            return all(ok for ok, _ in read.values()), {k: p for k, (_, p) in read.items()}

        return read_map
    raise TypeError(f"guard.results.record: no reader for a field typed {hint!r}")


def _is_bool(v: Any) -> bool:
    # numpy's bool too: a document still in memory (before guard.report._io.to_jsonable)
    # may hold one, as it may hold numpy numbers (numbers.Integral / Real) and tuples.
    return isinstance(v, bool) or (type(v).__module__ == "numpy" and type(v).__name__ == "bool")
