"""Atomic file writes and JSON-safe conversion shared by every writer.

Every report is serialised to a string first and only then written, to a temporary file in
the target's directory that replaces the target with ``os.replace``: a reader (a CI upload
step, a dashboard) sees either the old file or the whole new one, never a partial one, and a
serialisation error leaves the old file untouched.
"""

from __future__ import annotations

import dataclasses
import datetime as _dt
import enum
import math
import os
from collections.abc import Mapping
from pathlib import Path, PurePath
from typing import Any

import numpy as np

from guard.core import fsutil
from guard.core.errors import InternalError, UsageError
from guard.core.json_types import JsonObject

_DEFAULT_MODE = 0o644


def check_target(path: str | os.PathLike[str]) -> Path:
    """Return ``path`` as a Path, or raise UsageError if it cannot be written as a file."""
    target = Path(path)
    parent = target.parent
    if not parent.is_dir():
        raise UsageError(
            f"cannot write {target}: directory {parent} does not exist",
            where=str(target),
            hint="Create the directory first or choose another output path.",
        )
    if target.is_dir():
        raise UsageError(
            f"cannot write {target}: it is a directory",
            where=str(target),
            hint="Give a file name, e.g. results.json.",
        )
    return target


def atomic_write_text(path: str | os.PathLike[str], text: str) -> Path:
    """Write ``text`` (UTF-8) to ``path`` atomically (guard.core.fsutil); return the path written.

    The target is checked first (parent exists, not a directory), so a bad path is a
    UsageError naming it rather than an OSError.
    """
    return fsutil.atomic_write_text(check_target(path), text)


def to_jsonable(obj: Any, where: str = "$") -> Any:
    """Convert ``obj`` to plain JSON types, or raise InternalError naming the key path.

    numpy scalars and arrays become Python numbers and lists; tuples and sets become lists;
    paths and enums become strings; datetimes ISO 8601; dataclasses their fields (or their
    ``to_dict()``). Non-finite floats become None: strict JSON (jq, browsers, MLflow's UI)
    has no NaN or Infinity.
    """
    if obj is None or isinstance(obj, bool | str):
        return obj
    if isinstance(obj, int) and not isinstance(obj, bool):
        return int(obj)
    if isinstance(obj, float):
        return obj if math.isfinite(obj) else None
    if isinstance(obj, np.generic):
        return to_jsonable(obj.item(), where)
    if isinstance(obj, np.ndarray):
        return to_jsonable(obj.tolist(), where)
    if isinstance(obj, Mapping):
        out: JsonObject = {}  # any mapping's items, made JSON
        for key, value in obj.items():
            skey = _json_key(key, where)
            out[skey] = to_jsonable(value, f"{where}.{skey}")
        return out
    if isinstance(obj, list | tuple):
        return [to_jsonable(v, f"{where}[{i}]") for i, v in enumerate(obj)]
    if isinstance(obj, set | frozenset):
        items = [to_jsonable(v, f"{where}[{i}]") for i, v in enumerate(obj)]
        return sorted(items, key=repr)
    if isinstance(obj, enum.Enum):
        return to_jsonable(obj.value, where)
    if isinstance(obj, PurePath):
        return str(obj)
    if isinstance(obj, _dt.datetime | _dt.date):
        return obj.isoformat()
    if dataclasses.is_dataclass(obj) and not isinstance(obj, type):
        to_dict = getattr(obj, "to_dict", None)
        data = to_dict() if callable(to_dict) else dataclasses.asdict(obj)
        return to_jsonable(data, where)
    raise InternalError(
        f"cannot serialise {type(obj).__module__}.{type(obj).__qualname__} at {where} to JSON",
        hint="Convert it to plain numbers, strings, lists or dicts before reporting.",
    )


def _json_key(key: Any, where: str) -> str:
    if isinstance(key, str):
        return key
    if isinstance(key, np.generic):
        key = key.item()
    if isinstance(key, bool | int | float) or key is None or isinstance(key, enum.Enum):
        return str(key.value if isinstance(key, enum.Enum) else key)
    raise InternalError(
        f"cannot serialise a {type(key).__qualname__} dictionary key at {where} to JSON",
        hint="Use string keys.",
    )
