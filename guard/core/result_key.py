"""The one key of a result: (model, backend, canonical target).

Every reader pairs results by it: ``guard compare`` and baselines, ``guard ab
--base-ref``, ``guard bump``, the baseline index in MLflow (guard.track.index, which is
why it lives in this lowest layer), shard plans, ``guard merge`` and ``guard doctor``.

The canonical target is the manifest's (``manifest.target.canonical``): two spellings of
one target are one row. A result without a manifest (an error before the build) has only
the suite's spelling, which is then its target. ``key.case`` is the suite's spelling
instead, for the readers that work on the suite's cases rather than on what was built: a
shard plan (every shard must compute the same plan, and ``host`` resolves to each
machine's own CPU, so a plan of canonical targets would differ between two runners),
``guard merge`` (which checks results against that plan), and ``guard doctor`` (which
pairs a base and a head whose resolved target changed, to say how).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from guard.core.schema import section

Case = tuple[str, str, str]  # (model, backend, target as the suite spelled it)


@dataclass(frozen=True)
class ResultKey:
    """(model, backend, canonical target); ``written`` is the target as the suite spelled it."""

    model: str
    backend: str
    target: str
    written: str = field(default="", compare=False)

    @classmethod
    def of(cls, result: Mapping[str, Any]) -> ResultKey:
        """The key of a result object of the results contract."""
        written = str(result.get("target"))
        canonical = section(section(result, "manifest"), "target").get("canonical")
        return cls(
            str(result.get("model")), str(result.get("backend")), str(canonical or written), written
        )

    @property
    def case(self) -> Case:
        """(model, backend, target as the suite spelled it): a case of the suite."""
        return (self.model, self.backend, self.written)

    def __str__(self) -> str:
        return f"{self.model}/{self.backend}/{self.target}"
