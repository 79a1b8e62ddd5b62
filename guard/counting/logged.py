"""A counted block from a logged run: its fingerprint tag and its count metrics.

guard.track logs a result's counted fingerprint as the JSON tag COUNTED_FINGERPRINT_TAG and
its per-inference counts as ``counted.*`` metrics; guard history and the dashboard read them
back into the block guard.counting.verdict compares.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

from guard.results.counted import Counted, Fingerprint
from guard.track.records import COUNTED_FINGERPRINT_TAG

# The column of a find_runs frame that holds a run's counted fingerprint (JSON).
FINGERPRINT_COLUMN = f"tags.{COUNTED_FINGERPRINT_TAG}"


def parse_fingerprint(raw: Any) -> Fingerprint | None:
    """A run's counted fingerprint from its tag (None: not counted, or not readable)."""
    try:
        fp = json.loads(raw) if isinstance(raw, str) and raw else None
    except ValueError:
        return None
    return Fingerprint.from_json(fp) if isinstance(fp, dict) else None


def counted_block(metric: Callable[[str], Any], fingerprint: Fingerprint | None) -> Counted:
    """The counted block guard.counting.verdict compares, from a logged run's metrics
    (``metric("counted.instructions")``, ...) and its parsed fingerprint; the metrics are
    read as a written block's values are (one that is not a number reads as None)."""
    return Counted.from_json(
        {
            "instructions": metric("counted.instructions"),
            "bytes_loaded": metric("counted.bytes_loaded"),
            "bytes_stored": metric("counted.bytes_stored"),
            "fingerprint": fingerprint.to_json() if fingerprint is not None else {},
        }
    )
