"""The weights format: every constant at a 64-byte aligned offset in one flat blob.

``weights.bin`` is the blob; ``weights.json`` the index (:meth:`WeightsLayout.to_dict`):
name, offset, nbytes, dtype, shape and sha256 per constant, in name order.
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping
from dataclasses import dataclass
from typing import TypedDict

import numpy as np

from guard.compiler.graph.view import ALIGNMENT, align

WEIGHTS_SCHEMA_VERSION = 1  # of weights.json, the index WeightsLayout.to_dict writes


@dataclass(frozen=True)
class WeightsIndexEntry:
    name: str
    offset: int
    nbytes: int
    dtype: str
    shape: tuple[int, ...]
    sha256: str


class WeightsTensor(TypedDict):
    """One constant in weights.json."""

    name: str
    offset: int
    nbytes: int
    dtype: str
    shape: list[int]
    sha256: str


class WeightsIndex(TypedDict):
    """weights.json: :meth:`WeightsLayout.to_dict`."""

    schema_version: int
    alignment: int
    total_bytes: int
    tensors: list[WeightsTensor]


@dataclass(frozen=True)
class WeightsLayout:
    """Every constant at a 64-byte aligned offset in one flat blob."""

    total_bytes: int
    entries: tuple[WeightsIndexEntry, ...]

    def to_dict(self) -> WeightsIndex:
        return {
            "schema_version": WEIGHTS_SCHEMA_VERSION,
            "alignment": ALIGNMENT,
            "total_bytes": self.total_bytes,
            "tensors": [
                {"name": e.name, "offset": e.offset, "nbytes": e.nbytes, "dtype": e.dtype,
                 "shape": list(e.shape), "sha256": e.sha256}
                for e in self.entries
            ],
        }  # fmt: skip

    @classmethod
    def from_dict(cls, d: WeightsIndex) -> WeightsLayout:
        """The inverse of :meth:`to_dict`; the caller checks schema_version and the blob."""
        return cls(
            d["total_bytes"],
            tuple(
                WeightsIndexEntry(
                    e["name"], e["offset"], e["nbytes"], e["dtype"], tuple(e["shape"]), e["sha256"]
                )
                for e in d["tensors"]
            ),
        )


def pack_weights(constants: Mapping[str, np.ndarray]) -> tuple[np.ndarray, WeightsLayout]:
    """The weights blob (uint8) and its index, constants in name order."""
    entries, off = [], 0
    arrays = {k: np.ascontiguousarray(v) for k, v in sorted(constants.items())}
    for name, arr in arrays.items():
        digest = hashlib.sha256(arr.tobytes()).hexdigest()
        entries.append(
            WeightsIndexEntry(name, off, arr.nbytes, arr.dtype.name, tuple(arr.shape), digest)
        )
        off += align(arr.nbytes)
    blob = np.zeros(off, np.uint8)
    for e in entries:
        blob[e.offset : e.offset + e.nbytes] = np.frombuffer(arrays[e.name].tobytes(), np.uint8)
    return blob, WeightsLayout(off, tuple(entries))


def weight_views(blob: np.ndarray, layout: WeightsLayout) -> dict[str, np.ndarray]:
    """Read-only array views of every constant inside the blob."""
    out = {}
    for e in layout.entries:
        a = blob[e.offset : e.offset + e.nbytes].view(np.dtype(e.dtype)).reshape(e.shape)
        a.flags.writeable = False
        out[e.name] = a
    return out
