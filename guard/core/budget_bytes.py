"""A memory budget as a suite or the command line writes it: bytes or a unit string.

``2097152``, ``"2MiB"``, ``"512 KiB"``, ``"1.5MB"``: B, KiB, MiB, GiB (powers of 1024)
and kB, MB (powers of 1000). Zero, a negative number or another unit is refused with the
key that held it (exit 2). Kept free of heavy imports: the suite loader calls it.
"""

from __future__ import annotations

import re
from typing import Any

from guard.core.errors import UsageError

UNITS = {"B": 1, "KiB": 2**10, "MiB": 2**20, "GiB": 2**30, "kB": 10**3, "MB": 10**6}
HINT = "Write bytes or a number with a unit: B, KiB, MiB, GiB, kB, MB (e.g. 2MiB)."
_PATTERN = re.compile(r"\s*(-?[0-9]+(?:\.[0-9]+)?)\s*([A-Za-z]*)\s*")


def budget_bytes(value: Any) -> tuple[int, str | None]:
    """(bytes, None) for a valid budget, else (0, what is wrong with it)."""
    if isinstance(value, bool) or not isinstance(value, (int, float, str)):
        return 0, f"expected a byte count or a size like '2MiB', got {value!r}"
    if isinstance(value, str):
        m = _PATTERN.fullmatch(value)
        if not m:
            return 0, f"{value!r} is not a size"
        unit = m.group(2) or "B"
        if unit not in UNITS:
            return 0, f"unknown unit {unit!r} in {value!r}"
        number = float(m.group(1)) * UNITS[unit]
    else:
        number = float(value)
    if number < 1:
        return 0, f"a budget must be at least 1 byte, got {value!r}"
    return int(number), None


def parse_budget(value: Any, key: str) -> int:
    """Bytes of a budget ``value``; UsageError naming ``key`` (exit 2) when it is not one."""
    n, problem = budget_bytes(value)
    if problem is not None:
        raise UsageError(f"{key}: {problem}", hint=HINT)
    return n


def fmt_bytes(n: int) -> str:
    """``1.50 MiB`` / ``312.0 KiB`` / ``64 B``: what the ladder prints."""
    if n >= 2**20:
        return f"{n / 2**20:.2f} MiB"
    if n >= 2**10:
        return f"{n / 2**10:.1f} KiB"
    return f"{n} B"


def int8_error_text(
    max_abs_err: float, max_rel_err: float | None, top1_agreement: float | None
) -> str:
    """A memory budget's int8 rung's stated error against the fp32 unconstrained build (the
    rung is not held to the fp32 tolerance: quantising changes the numbers)."""
    parts = [f"max abs err {max_abs_err:.3g}"]
    if max_rel_err is not None:
        parts.append(f"{max_rel_err:.3g} of the fp32 output range")
    if top1_agreement is not None:
        parts.append(f"top-1 agreement {top1_agreement:.0%}")
    return "int8 outputs against fp32: " + ", ".join(parts)
