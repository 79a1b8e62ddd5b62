"""The bundled compiler's tuning cache: one JSON file, a versioned artefact.

Layout (``schema_version`` 1)::

    {"schema_version": 1, "kind": "guard-bundled-tuning-cache",
     "entries_sha256": <sha256 of the canonical JSON of "entries">,
     "entries": [{"key": <TaskKey.text>, "op", "shape": [[dim, n], ...], "dtype", "target",
                  "compiler", "schedule": {...}, "time_s", "default_schedule": {...},
                  "default_time_s", "measured": {"warmup", "reps", "threads", "candidates"},
                  "tuned_at": ISO8601}, ...]}

Entries are sorted by key and written with sorted keys, so one set of entries is one
file and one sha256 (which pins the artefact that used it). Loading validates the whole
file before anything is used: a file that is not JSON, an entry with a missing or
mistyped field, a key that is not the text of its own fields, a schedule its op does not
accept, or ``entries_sha256`` not matching (a hand edit) is refused with the path and the
first bad entry; a newer ``schema_version`` is one line saying which guard reads it.
Never half-read.

Concurrent writers (two ``guard tune`` runs on one cache) do not lose entries: a writer
takes an exclusive ``fcntl`` lock on ``<cache>.lock``, re-reads the file under it, merges
its entries in (a key measured again replaces the older entry), and replaces the file
atomically.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import json
import math
import os
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypedDict, cast

from guard.compiler.tuning import schedule_json
from guard.compiler.tuning.keys import OPS, TaskKey, TaskKeyJson
from guard.core.errors import SchemaError
from guard.core.fsutil import BoundedReadError, atomic_write_text, read_bounded
from guard.core.json_types import Json, JsonObject
from guard.core.schema import Schema

SCHEMA_VERSION = 1
KIND = "guard-bundled-tuning-cache"
MAX_CACHE_BYTES = 64 * 1024 * 1024
_ENTRY_FIELDS: dict[str, type | tuple[type, ...]] = {
    "key": str, "op": str, "shape": list, "dtype": str, "target": str, "compiler": str,
    "schedule": dict, "time_s": (int, float), "default_schedule": dict,
    "default_time_s": (int, float),
}  # fmt: skip


class CacheError(SchemaError):
    """A tuning cache that cannot be used (exit 2): the path and the first bad entry."""


# Older layouts load too; a newer one needs a newer guard.
_CACHE = Schema(
    "tuning cache",
    SCHEMA_VERSION,
    "Upgrade guard, or re-tune with this one (`guard tune SUITE`).",
    up_to=True,
    error=CacheError,
)


@dataclass(frozen=True)
class Entry:
    key: TaskKey
    schedule: Any
    time_s: float
    default_schedule: Any
    default_time_s: float
    # measured and tuned_at (guard.compiler.tuning.tune), and any key this guard does not
    # know, kept as read
    extra: Mapping[str, Json] = field(default_factory=dict)

    @property
    def speedup(self) -> float:
        return self.default_time_s / self.time_s if self.time_s > 0 else 1.0

    def to_dict(self) -> JsonObject:
        """The entry as the cache holds it: the key's fields, both schedules and times, and
        the extra keys as they came."""
        return {
            "key": self.key.text,
            **self.key.to_dict(),
            "schedule": schedule_json.to_dict(self.schedule),
            "time_s": self.time_s,
            "default_schedule": schedule_json.to_dict(self.default_schedule),
            "default_time_s": self.default_time_s,
            **dict(self.extra),
        }


class CacheDocument(TypedDict):
    """The cache file (see the module docstring)."""

    schema_version: int
    kind: str
    entries_sha256: str
    entries: list[JsonObject]  # Entry.to_dict, sorted by key


def entries_sha256(entries: list[Json]) -> str:
    """Of ``entries`` as written or as read (before they are validated)."""
    text = json.dumps(entries, sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(text.encode()).hexdigest()


@dataclass
class TuningCache:
    path: Path | None
    entries: dict[str, Entry]
    sha256: str | None = None  # of the file's bytes, as the manifest pins it

    def __len__(self) -> int:
        return len(self.entries)

    def get(self, key: TaskKey) -> Entry | None:
        return self.entries.get(key.text)

    def keys(self) -> list[TaskKey]:
        return [e.key for e in self.entries.values()]

    def document(self) -> CacheDocument:
        rows = [self.entries[k].to_dict() for k in sorted(self.entries)]
        return {
            "schema_version": SCHEMA_VERSION,
            "kind": KIND,
            "entries_sha256": entries_sha256(rows),
            "entries": rows,
        }


def _entry(raw: Any, i: int, path: Path) -> Entry:
    def bad(why: str) -> CacheError:
        key = raw.get("key") if isinstance(raw, Mapping) else None
        return CacheError(
            f"tuning cache {path}: entry {i}" + (f" ({key})" if key else "") + f": {why}",
            where=str(path),
            hint="The file is refused as a whole. Re-create it with `guard tune SUITE` "
            "(or restore the uploaded cache artefact); do not edit it by hand.",
        )

    if not isinstance(raw, Mapping):
        raise bad(f"is {type(raw).__name__}, expected an object")
    for k, t in _ENTRY_FIELDS.items():
        if k not in raw:
            raise bad(f"missing field {k!r}")
        if not isinstance(raw[k], t) or isinstance(raw[k], bool):
            raise bad(f"field {k!r} is {type(raw[k]).__name__}")
    if raw["op"] not in OPS:
        raise bad(f"op {raw['op']!r} is not one of {', '.join(OPS)}")
    for k in ("time_s", "default_time_s"):
        if not (math.isfinite(raw[k]) and raw[k] > 0):
            raise bad(f"{k} {raw[k]!r} is not a positive time")
    for pair in raw["shape"]:
        if not (
            isinstance(pair, list)
            and len(pair) == 2
            and isinstance(pair[0], str)
            and isinstance(pair[1], (int, str))
            and not isinstance(pair[1], bool)
        ):
            raise bad(f"shape entry {pair!r} is not a [dim name, value] pair")
    key = TaskKey.from_dict(cast(TaskKeyJson, raw))  # its fields validated above
    if key.text != raw["key"]:
        raise bad(f"key does not match its fields (the fields say {key.text!r})")
    try:
        sched = schedule_json.from_dict(raw["op"], raw["schedule"], raw["target"])
        default = schedule_json.from_dict(raw["op"], raw["default_schedule"], raw["target"])
    except ValueError as exc:
        raise bad(str(exc)) from None
    extra = {k: raw[k] for k in raw if k not in _ENTRY_FIELDS}
    return Entry(key, sched, float(raw["time_s"]), default, float(raw["default_time_s"]), extra)


def parse(data: bytes, path: Path) -> TuningCache:
    """Validate a whole cache document; the cache, or CacheError naming the first problem."""
    hint = "Re-create it with `guard tune SUITE`, or restore the uploaded cache artefact."
    try:
        doc = json.loads(data.decode("utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise CacheError(
            f"tuning cache {path} is not JSON: {exc}", where=str(path), hint=hint
        ) from None
    if not isinstance(doc, Mapping) or doc.get("kind") != KIND:
        raise CacheError(
            f"tuning cache {path} is not a guard bundled tuning cache (kind {KIND!r} missing)",
            where=str(path),
            hint="options.bundled.tuning_cache names the file `guard tune` writes; "
            "a TVM database goes to options.tvm.tuning_cache.",
        )
    _CACHE.check_version(doc, _CACHE.at(path))
    rows = doc.get("entries")
    if not isinstance(rows, list):
        raise CacheError(
            f"tuning cache {path}: 'entries' is not a list", where=str(path), hint=hint
        )
    if doc.get("entries_sha256") != entries_sha256(rows):
        raise CacheError(
            f"tuning cache {path}: entries_sha256 does not match its entries (edited by hand "
            "or damaged)",
            where=str(path),
            hint=hint,
        )
    entries: dict[str, Entry] = {}
    for i, raw in enumerate(rows):
        e = _entry(raw, i, path)
        if e.key.text in entries:
            raise _entry_dup(path, i, e.key.text)
        entries[e.key.text] = e
    return TuningCache(path, entries, hashlib.sha256(data).hexdigest())


def _entry_dup(path: Path, i: int, key: str) -> CacheError:
    return CacheError(f"tuning cache {path}: entry {i} ({key}): key appears twice",
                      where=str(path), hint="Re-create it with `guard tune SUITE`.")  # fmt: skip


def load(path: str | os.PathLike[str]) -> TuningCache:

    p = Path(path)
    try:
        data = read_bounded(p, MAX_CACHE_BYTES)
    except BoundedReadError as exc:
        raise CacheError(f"tuning cache {p} {exc.reason}", where=str(p)) from None
    except OSError as exc:
        raise CacheError(f"tuning cache {p} cannot be read: {exc.strerror or exc}",
                         where=str(p)) from None  # fmt: skip
    return parse(data, p)


@contextlib.contextmanager
def locked(path: Path) -> Iterator[None]:
    """An exclusive lock for read-merge-write of ``path`` (blocks until it is free)."""
    lock = path.with_name(path.name + ".lock")
    with open(lock, "a+") as fh:
        fcntl.flock(fh, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(fh, fcntl.LOCK_UN)


def merge_into(path: str | os.PathLike[str], new: list[Entry]) -> TuningCache:
    """Add ``new`` to the cache at ``path`` (created if absent) under the lock; the result.

    A key already in the file is replaced by the new measurement; other entries are kept,
    including those another ``guard tune`` wrote while this one was measuring.
    """

    p = Path(path)
    p.parent.mkdir(parents=True, exist_ok=True)
    with locked(p):
        current = load(p) if p.exists() else TuningCache(p, {})
        merged = dict(current.entries)
        for e in new:
            merged[e.key.text] = e
        cache = TuningCache(p, merged)
        text = json.dumps(cache.document(), indent=1, sort_keys=True) + "\n"
        atomic_write_text(p, text)
        cache.sha256 = hashlib.sha256(text.encode()).hexdigest()
    return cache
