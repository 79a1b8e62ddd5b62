"""The one narrow interface every backend implements.

The rest of guard does not know which backend it holds: it builds an artefact directory,
loads it into a session, runs it, and asks it to describe its partitions and memory.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import NotRequired, Protocol, TypedDict

import numpy as np

from guard.core.json_types import Json, JsonObject
from guard.manifest.written import ComponentPins, TuningObservations


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
    # the suite's options block for this backend, as the user wrote it (each backend
    # checks its own keys)
    options: JsonObject = field(default_factory=dict)
    # The suite's bound input values (what the golden feeds): a backend that runs the
    # model at build time (onnxruntime's memory probe) runs it on these, not on zeros.
    inputs: dict[str, np.ndarray] | None = None


class SubgraphParts(TypedDict):
    """The partitions of a graph a host If/Loop calls."""

    count: int
    fallback_nodes: int


class PartitionDetail(TypedDict, total=False):
    """One partition of PartitionInfo.details, with what its backend says of it."""

    id: int  # bundled (the partition report's partitions)
    backend: str
    delegated: bool
    first: str  # its first and last node
    last: str
    kernels: list[list[str]]  # [node, kernel] per step of a native partition
    # a host If/Loop (bundled): per branch or body, its partitions and fallback nodes
    subgraphs: dict[str, SubgraphParts]
    provider: str  # onnxruntime, openvino
    nodes: int
    ops: dict[str, int]  # nodes per op type
    unsupported: Json  # older records: what a backend reported unsupported, in its shape
    unsupported_ops: Json
    fallback_ops: Json


class QuantConversions(TypedDict):
    nodes: int
    pairs: int
    fused: int


class PartitionsJson(TypedDict):
    """PartitionInfo as a result's ``partitions`` and a backend's artefact record hold it."""

    count: int
    delegated_nodes: int
    fallback_nodes: int
    by_provider: dict[str, int]
    details: list[PartitionDetail]
    how: str
    layout_conversions: NotRequired[int | None]  # always written; older records lack it
    quant_conversions: NotRequired[QuantConversions]


class MemoryJson(TypedDict):
    """MemoryInfo as a backend's artefact record holds it."""

    arena_bytes: int | None
    lower_bound_bytes: int | None
    how: str
    extra: NotRequired[JsonObject]


class KernelRow(TypedDict, total=False):
    """One row of a result's ``kernels``: a generated kernel (bundled) or a profiled node
    or layer (onnxruntime, openvino), its time per inference and share of the total."""

    kernel: str
    op: str | None
    provider: str | None
    ms: float
    share: float | None
    nodes: list[str]
    source: str  # the profiler that measured it


@dataclass
class PartitionInfo:
    """How a graph was split across execution providers / delegates."""

    count: int
    delegated_nodes: int
    fallback_nodes: int
    by_provider: dict[str, int] = field(default_factory=dict)  # nodes per provider
    details: list[PartitionDetail] = field(default_factory=list)
    how: str = ""  # how the numbers were obtained
    # Layout conversions (relayouts, NCHW<->NHWC transposes) in the final graph; None
    # where the backend does not say.
    layout_conversions: int | None = None
    # QuantizeLinear/DequantizeLinear left on activations ({nodes, pairs, fused}, the
    # bundled partition report's count); None where the backend does not say, and then
    # not written, so a result without it reads and writes as before
    quant_conversions: QuantConversions | None = None

    @classmethod
    def from_dict(cls, d: PartitionsJson) -> PartitionInfo:
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

    def to_dict(self) -> PartitionsJson:
        out: PartitionsJson = {
            "count": self.count,
            "delegated_nodes": self.delegated_nodes,
            "fallback_nodes": self.fallback_nodes,
            "by_provider": dict(self.by_provider),
            "details": list(self.details),
            "how": self.how,
            "layout_conversions": self.layout_conversions,
        }
        if self.quant_conversions is not None:
            out["quant_conversions"] = QuantConversions(**self.quant_conversions)
        return out


@dataclass
class MemoryInfo:
    """Arena size as the backend can report it, with how it was measured."""

    arena_bytes: int | None
    lower_bound_bytes: int | None
    how: str  # e.g. "liveness lower bound from ORT's optimised graph; arena = ..."
    # backend-specific facts (the bundled planner's summary and budget, onnxruntime's
    # largest block, openvino's constant bytes, ...), written into the result's ``memory``
    # block as they come
    extra: JsonObject = field(default_factory=dict)

    @classmethod
    def from_dict(cls, d: MemoryJson) -> MemoryInfo:
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
    compiler: ComponentPins  # {"name", "version", ...}: the manifest's compiler pins
    runtime: ComponentPins
    # the options the session is loaded with, as the backend records them (its own keys)
    session_options: JsonObject = field(default_factory=dict)
    tuning: TuningObservations = field(default_factory=lambda: TuningObservations())
    # the graph diff of backends that optimise (guard.compiler.graph_diff, as it returns it)
    graph: JsonObject | None = None
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

    def versions(self) -> tuple[ComponentPins, ComponentPins]:
        """(compiler, runtime) pins: {"name", "version"} each."""
        ...

    def build(self, req: BuildRequest) -> BuildInfo: ...

    def load(self, artefact_dir: Path, threads: int) -> Session: ...
