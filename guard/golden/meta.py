"""What a golden records (``golden.json``), typed: the TypedDicts its writers build and
the record its readers read.

``GoldenJson`` is golden.json as ``GoldenStore.save`` writes it (the producer, the model's
sha256, each array's dtype, shape and sha256, the update history). Readers read a loaded
golden's ``meta`` as a ``GoldenMeta`` (guard.results.record.Record: lenient on what an
older or edited file holds, and lossless), never by key; the store alone checks the
loaded JSON while it reads the arrays.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import NotRequired, TypedDict

from guard.results.record import Json, Record


class Producer(TypedDict):
    """The golden's producer: onnxruntime with every graph optimisation off."""

    name: str
    version: str
    graph_optimization_level: str
    threads: int
    providers: list[str]


# A suite input's spec as the golden records it (what its data were made from): its shape,
# then file and key, or dist, seed and the distribution's parameters (mean, std, ...).
InputSpecRecord = dict[str, str | int | float | list[int] | None]


class ArrayJson(TypedDict):
    dtype: str
    shape: list[int]
    sha256: str


class OrderJson(TypedDict):
    """The arrays' names in graph order (golden.json sorts its keys)."""

    inputs: list[str]
    outputs: list[str]


class HistoryEntry(TypedDict):
    """One creation or update: who, when, why, and the outputs' hashes before and after."""

    who: str
    when: str
    why: str
    old_sha256: str | None
    new_sha256: str
    producer: Producer


class GoldenJson(TypedDict):
    """golden.json as ``GoldenStore.save`` writes it."""

    schema_version: int
    model: str
    model_sha256: str
    producer: Producer
    created: str
    updated: str
    outputs_sha256: str
    order: OrderJson
    inputs: dict[str, ArrayJson]
    outputs: dict[str, ArrayJson]
    history: list[Json]  # every entry kept as read (HistoryEntry for the ones written now)
    input_specs: NotRequired[dict[str, InputSpecRecord]]


@dataclass(frozen=True, kw_only=True)
class GoldenMeta(Record):
    """A loaded golden's metadata (golden.json), and ``stale`` for a golden whose inputs
    no longer match the suite's (held in memory, never written)."""

    schema_version: int | None = None
    model: str | None = None
    model_sha256: str | None = None
    producer: Mapping[str, Json] = field(default_factory=dict)
    created: str | None = None
    updated: str | None = None
    outputs_sha256: str | None = None
    history: tuple[Json, ...] = ()
    input_specs: Mapping[str, Json] | None = None
    stale: str | None = None  # what changed in the suite's inputs
