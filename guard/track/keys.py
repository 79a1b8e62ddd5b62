"""What MLflow accepts as a key or a value, and guard's spelling of series and targets in keys.

Keys are made legal for MLflow (alphanumerics, ``_ - . space``; no ``/`` so a key never
reads as a path); values are truncated to MLflow's limits rather than rejected. A target
string (a host's canonical target runs to ~330 characters) is shortened for keys by
:func:`target_key` (a readable head and a hash). Pure functions, no mlflow import.
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Iterator, Mapping
from typing import Any

from guard.results.result import Result

# MLflow's limits (mlflow.utils.validation; a test pins them to the installed MLflow).
# Copied rather than imported so that importing guard.track does not import mlflow.
MAX_ENTITY_KEY_LENGTH = 250
MAX_PARAM_VAL_LENGTH = 6000
MAX_TAG_VAL_LENGTH = 8000

_BAD_KEY_CHARS = re.compile(r"[^\w.\- ]")


def clean_key(key: str) -> str:
    cleaned = _BAD_KEY_CHARS.sub("_", str(key)).strip(" ")
    if cleaned in ("", ".", ".."):
        cleaned = cleaned.replace(".", "_") or "_"
    return cleaned[:MAX_ENTITY_KEY_LENGTH]


def _text(value: Any) -> str:
    return value if isinstance(value, str) else json.dumps(value, sort_keys=True, default=str)


def param_value(value: Any) -> str:
    return _text(value)[:MAX_PARAM_VAL_LENGTH]


def tag_value(value: Any) -> str:
    return _text(value)[:MAX_TAG_VAL_LENGTH]


def as_number(value: Any) -> float | None:
    """A metric value, or None for anything that is not a number (bools count as 0/1)."""
    if isinstance(value, bool):
        return float(value)
    if isinstance(value, int | float):
        return float(value)
    try:  # numpy scalars and the like
        return float(value) if hasattr(value, "__float__") and not isinstance(value, str) else None
    except (TypeError, ValueError):
        return None


def flatten(tree: Any, prefix: str = "") -> Iterator[tuple[str, Any]]:
    """Dotted keys for the leaves of nested dicts; lists and scalars are leaves."""
    if isinstance(tree, Mapping):
        if not tree and prefix:
            yield prefix, tree
        for key, value in tree.items():
            yield from flatten(value, f"{prefix}.{key}" if prefix else str(key))
    elif prefix:
        yield prefix, tree


# Above this length (or with characters a key cannot hold) a target is shortened for keys.
TARGET_KEY_MAX = 40
_KEY_HEAD = re.compile(r"[^\w.\-]+")


def target_key(target: Any) -> str:
    """A short, legal, stable spelling of a target string for metric keys.

    ``host`` stays ``host``; ``llvm -mtriple=aarch64-linux-gnu -mattr=+neon`` (or a 330
    character canonical target) becomes a readable head plus 10 hex digits of its sha256,
    e.g. ``llvm_-mtriple_aarch64-lin-3f1c0a9b2e``. The full string goes in a param.
    """
    text = str(target) if target is not None and str(target) else "?"
    if len(text) <= TARGET_KEY_MAX and clean_key(text) == text and " " not in text:
        return text
    digest = hashlib.sha256(text.encode()).hexdigest()[:10]
    head = _KEY_HEAD.sub("_", text)[:24].strip("_.-") or "target"
    return f"{head}-{digest}"


def series_key(model: Any, backend: Any, target: Any) -> str:
    """``model.backend.target_key``: one series of a suite, legal as a key and a prefix."""
    parts = [_KEY_HEAD.sub("_", str(x or "?")).strip("_") or "_" for x in (model, backend)]
    return clean_key(".".join([*parts, target_key(target)]))


def result_series(result: Result) -> str:
    return series_key(result.model, result.backend, result.target)
