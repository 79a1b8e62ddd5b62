"""The bundled artefact's manifest (artefact.json), key by key, and its memory budget block
(what guard.compiler.fit.ladder.Ladder.to_dict writes into it)."""

from __future__ import annotations

from typing import NotRequired, TypedDict

from guard.core.json_types import JsonObject


class BoundBy(TypedDict):
    """A buffer live at the smallest plan's peak: its first tensors, bytes and node."""

    tensors: list[str]
    bytes: int
    at_node: str


class RungFile(TypedDict):
    """One rung of the escape ladder (guard.compiler.fit.ladder.Step.to_dict)."""

    rung: int
    name: str
    arena_bytes: int | None
    latency_cost_pct: float | None
    what: str
    extra_macs_pct: float
    max_abs_err: float | None
    seconds: float
    # rung 5 (int8) and a spill on top of it: the outputs state their error against the
    # fp32 unconstrained build instead of meeting its tolerance
    quantised: NotRequired[bool]
    max_rel_err: NotRequired[float | None]  # max abs error / max |fp32 output|
    top1_agreement: NotRequired[float | None]  # a classifier's, over seeded inputs
    spill_bytes: NotRequired[int]
    spill_traffic_bytes: NotRequired[int | None]


class MemoryBudget(TypedDict):
    """The ladder for a memory budget (guard.compiler.fit.ladder.Ladder.to_dict)."""

    bytes: int
    fits: bool
    rung: int | None
    ladder: list[RungFile]
    smallest_reachable_bytes: int
    bound_by: list[BoundBy]
    unconstrained_lower_bound_bytes: int
    search_s: float


class BudgetPin(TypedDict):
    bytes: int
    rung: int | None


class CompilerPins(TypedDict):
    """The manifest's compiler pins (the same as BundledBackend.versions())."""

    name: str
    version: str
    pipeline: str
    target: str
    profile: str
    memory_budget: NotRequired[BudgetPin]


class TensorSignature(TypedDict):
    shape: list[int]
    dtype: str


class PartitionCounts(TypedDict):
    count: int
    delegated_partitions: int
    delegated_nodes: int
    fallback_nodes: int


class ArtefactManifest(TypedDict):
    """artefact.json. ``codegen`` (None without generated code): llvmlite and LLVM versions,
    the code generator's target pins (their keys are guard.compiler.codegen.llvm_target's
    CodegenTarget.to_dict), kernels, steps and compile_s."""

    schema_version: int
    kind: str
    compiler: CompilerPins
    inputs: dict[str, TensorSignature]
    outputs: dict[str, TensorSignature]
    partitions: PartitionCounts
    arena_bytes: int
    arena_lower_bound_bytes: int
    weights_bytes: int
    codegen: JsonObject | None
    files: dict[str, str]  # file name -> sha256
    memory_budget: NotRequired[MemoryBudget]
    subgraphs: NotRequired[dict[str, str]]  # sub/N_ATTR -> its artefact.json's sha256
