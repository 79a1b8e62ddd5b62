"""The one narrow interface every backend implements.

The rest of guard does not know which backend it holds: it builds an artefact directory,
loads it into a session, runs it, and asks it to describe its partitions and memory.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

import numpy as np


@dataclass(frozen=True)
class BuildRequest:
    """Everything a backend needs to build one model for one target."""

    model_path: Path  # the .onnx file (already validated and shape-bound)
    input_shapes: dict[str, tuple[int, ...]]  # every graph input, dims bound
    target_raw: str  # as the suite wrote it, e.g. "host" or "llvm -mtriple=..."
    target_canonical: str  # guard.manifest.target_string.canonicalize(target_raw)
    threads: int
    out_dir: Path  # the artefact directory to fill (exists, empty, private)
    tuning_cache: Path | None = None
    options: dict[str, Any] = field(default_factory=dict)  # backend-specific suite options
    # The suite's bound input values (what the golden feeds): a backend that runs the
    # model at build time (onnxruntime's memory probe) runs it on these, not on zeros.
    inputs: dict[str, np.ndarray] | None = None


@dataclass
class PartitionInfo:
    """How a graph was split across execution providers / delegates."""

    count: int
    delegated_nodes: int
    fallback_nodes: int
    by_provider: dict[str, int] = field(default_factory=dict)  # nodes per provider
    details: list[dict[str, Any]] = field(default_factory=list)  # per-partition detail
    how: str = ""  # how the numbers were obtained
    # Layout conversions (relayouts, NCHW<->NHWC transposes) in the final graph; None
    # where the backend does not say.
    layout_conversions: int | None = None
    # QuantizeLinear/DequantizeLinear left on activations ({nodes, pairs, fused}, the
    # bundled partition report's count); None where the backend does not say, and then
    # not written, so a result without it reads and writes as before
    quant_conversions: dict[str, int] | None = None

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> PartitionInfo:
        """The inverse of to_dict (what a backend stored in its artefact)."""
        return cls(
            count=d["count"],
            delegated_nodes=d["delegated_nodes"],
            fallback_nodes=d["fallback_nodes"],
            by_provider=dict(d["by_provider"]),
            details=list(d["details"]),
            how=d["how"],
            layout_conversions=d.get("layout_conversions"),
            quant_conversions=d.get("quant_conversions"),
        )

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "count": self.count,
            "delegated_nodes": self.delegated_nodes,
            "fallback_nodes": self.fallback_nodes,
            "by_provider": dict(self.by_provider),
            "details": list(self.details),
            "how": self.how,
            "layout_conversions": self.layout_conversions,
        }
        if self.quant_conversions is not None:
            out["quant_conversions"] = dict(self.quant_conversions)
        return out


@dataclass
class MemoryInfo:
    """Arena size as the backend can report it, with how it was measured."""

    arena_bytes: int | None
    lower_bound_bytes: int | None
    how: str  # e.g. "liveness lower bound from ORT's optimised graph; arena = ..."
    extra: dict[str, Any] = field(default_factory=dict)

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> MemoryInfo:
        """From the {arena_bytes, lower_bound_bytes, how, extra} a backend stored."""
        return cls(
            arena_bytes=d["arena_bytes"],
            lower_bound_bytes=d["lower_bound_bytes"],
            how=d["how"],
            extra=dict(d.get("extra", {})),
        )


@dataclass
class BuildInfo:
    """What a build produced, recorded into the manifest and the result."""

    payload: str  # file name of the payload inside the artefact dir
    compiler: dict[str, Any]  # {"name", "version", ...}
    runtime: dict[str, Any]  # {"name", "version", ...}
    session_options: dict[str, Any] = field(default_factory=dict)
    tuning: dict[str, Any] = field(default_factory=dict)  # {"entries","hits","misses"}
    graph: dict[str, Any] | None = None  # graph diff (backends that optimise)
    # What the build warned about (e.g. tuning-cache misses), one line each; the pipeline
    # collects Python warnings raised during build() here so they reach the report.
    warnings: list[str] = field(default_factory=list)


class Session(Protocol):
    """A loaded artefact, ready to run."""

    input_names: list[str]
    output_names: list[str]

    def run(self, feeds: dict[str, np.ndarray]) -> list[np.ndarray]: ...

    def partitions(self) -> PartitionInfo: ...

    def memory(self) -> MemoryInfo: ...


class Backend(Protocol):
    """build / load / run / describe partitions / describe memory."""

    name: str

    def versions(self) -> tuple[dict[str, Any], dict[str, Any]]:
        """(compiler, runtime) pins: {"name", "version"} each."""
        ...

    def build(self, req: BuildRequest) -> BuildInfo: ...

    def load(self, artefact_dir: Path, threads: int) -> Session: ...
