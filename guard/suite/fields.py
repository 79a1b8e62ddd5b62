"""Where a suite error is, and the checks every value of a suite goes through.

:class:`Fields` carries the suite file; its errors are guard.core.schema's ``FILE: KEY: what``
(a SuiteError, exit 2), a misspelt key gets the closest allowed one, and a shown value is
cut short (an aliased or huge value is never expanded into a message).
"""

from __future__ import annotations

import difflib
import math
from pathlib import Path
from typing import Any

from guard.core.errors import SuiteError
from guard.core.json_types import JsonObject
from guard.core.schema import show

MAX_THREADS = 1024
MAX_INT = 2**53  # integers beyond this are typos (and not exact as floats)


def suggest(key: str, allowed: set[str]) -> str:
    close = difflib.get_close_matches(key, sorted(allowed), n=1, cutoff=0.6)
    if close:
        return f"Did you mean {close[0]!r}?"
    return f"Allowed keys: {', '.join(sorted(allowed))}."


class Fields:
    """The suite file being read, so every error names it and the dotted key at fault."""

    def __init__(self, path: Path):
        self.path = path

    def err(self, key: str, message: str, hint: str | None = None) -> SuiteError:
        """``FILE: KEY: message`` (guard.core.schema's form), a SuiteError (exit 2)."""
        return SuiteError(message, where=str(self.path), field=key or None, hint=hint)

    def mapping(self, value: Any, key: str, allowed: set[str]) -> JsonObject:
        """``value`` as the mapping it must be, its keys checked against ``allowed`` (the
        values are the file's, still to be checked by the caller)."""
        if value is None:
            return {}
        if not isinstance(value, dict):
            raise self.err(key, f"expected a mapping, got {type(value).__name__}")
        for k in value:
            if not isinstance(k, str):
                raise self.err(key, f"key {show(k)} is not a string")
            if k not in allowed:
                shown = k if len(k) <= 60 else k[:57] + "..."
                raise self.err(
                    f"{key}.{shown}" if key else shown, "unknown key", suggest(k[:100], allowed)
                )
        return value

    def number(
        self,
        value: Any,
        key: str,
        *,
        positive: bool = False,
        integer: bool = False,
        minimum: float | None = None,
    ) -> float:
        if isinstance(value, bool) or not isinstance(value, int | float):
            raise self.err(key, f"expected a number, got {show(value)}")
        if isinstance(value, float) and not math.isfinite(value):
            raise self.err(
                key,
                f"expected a finite number, got {show(value)}",
                "Infinite or NaN bounds would switch the check off; remove the key "
                "or give a number.",
            )
        if abs(value) > MAX_INT:
            raise self.err(key, f"{show(value)} is out of range (at most {MAX_INT})")
        if integer and not float(value).is_integer():
            raise self.err(key, f"expected an integer, got {show(value)}")
        if positive and value <= 0:
            raise self.err(key, f"must be > 0, got {show(value)}")
        if minimum is not None and value < minimum:
            raise self.err(key, f"must be >= {minimum}, got {show(value)}")
        return int(value) if integer else float(value)

    def string_list(self, value: Any, key: str) -> tuple[str, ...]:
        if isinstance(value, str):
            value = [value]
        if not isinstance(value, list) or not value or not all(isinstance(v, str) for v in value):
            raise self.err(key, f"expected a non-empty list of names, got {show(value)}")
        return tuple(value)
