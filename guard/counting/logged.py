"""A counted block from a logged run: its fingerprint tag and its count metrics.

guard.track logs a result's counted fingerprint as the JSON tag COUNTED_FINGERPRINT_TAG and
its per-inference counts as ``counted.*`` metrics; guard history and the dashboard read them
back into the block guard.counting.verdict compares.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from typing import Any

from guard.track.records import COUNTED_FINGERPRINT_TAG

# The column of a find_runs frame that holds a run's counted fingerprint (JSON).
FINGERPRINT_COLUMN = f"tags.{COUNTED_FINGERPRINT_TAG}"


def parse_fingerprint(raw: Any) -> dict[str, Any] | None:
    """A run's counted fingerprint from its tag (None: not counted, or not readable)."""
    try:
        fp = json.loads(raw) if isinstance(raw, str) and raw else None
    except ValueError:
        return None
    return fp if isinstance(fp, dict) else None


def counted_block(
    metric: Callable[[str], Any], fingerprint: Mapping[str, Any] | None
) -> dict[str, Any]:
    """The counted block guard.counting.verdict compares, from a logged run's metrics
    (``metric("counted.instructions")``, ...) and its parsed fingerprint."""
    return {
        "instructions": metric("counted.instructions"),
        "bytes_loaded": metric("counted.bytes_loaded"),
        "bytes_stored": metric("counted.bytes_stored"),
        "fingerprint": dict(fingerprint or {}),
    }
