"""The results file (contract v1, docs/ARCHITECTURE.md), written by ``guard run --json``."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

from guard.report._io import atomic_write_text, check_target, to_jsonable


def dumps(doc: Any) -> str:
    """The document as stable JSON text: sorted keys, two-space indent, UTF-8, newline-ended.

    Stable so that two runs with equal results give byte-equal files (diffable, hashable).
    """
    return (
        json.dumps(to_jsonable(doc), sort_keys=True, indent=2, ensure_ascii=False, allow_nan=False)
        + "\n"
    )


def write_json(doc: Any, path: str | os.PathLike[str]) -> Path:
    """Write the results document to ``path`` atomically; return the path.

    Raises UsageError when the directory does not exist, InternalError (naming the key
    path, e.g. ``$.results[1].numerics.x``) when a value cannot be serialised; in both
    cases an existing file at ``path`` is left untouched.
    """
    check_target(path)
    return atomic_write_text(path, dumps(doc))
