"""The partition report's JSON, key by key: what :func:`guard.compiler.partition.assign.report_dict`
builds, an artefact's partitions.json and ``guard partition --json`` print."""

from __future__ import annotations

from typing import NotRequired, TypedDict

from guard.compiler.frontend.specialise import Specialised
from guard.compiler.graph.exec_order import ScheduleFile
from guard.compiler.graph.memory import MemorySummary


class PartitionRow(TypedDict):
    id: int
    backend: str
    delegated: bool
    nodes: int
    first: str
    last: str
    ops: dict[str, int]  # op -> nodes of that op


# "from" is a Python keyword: the functional form.
Boundary = TypedDict("Boundary", {"tensor": str, "bytes": int, "from": int, "to": int})


class Split(TypedDict):
    """A node off the first backend: where it went and why each backend declined it."""

    node: str
    op: str
    partition: int
    backend: str
    declined: dict[str, str]  # backend -> reason


class QuantConversions(TypedDict):
    nodes: int
    pairs: int
    fused: int


class ControlFlow(TypedDict):
    """An If/Loop on the host: its partition and the reports of the graphs it calls."""

    node: str
    op: str
    partition: int
    backend: str
    subgraphs: dict[str, PartitionReport]  # attribute -> that branch's or body's report
    specialised: NotRequired[Specialised]


class PartitionReport(TypedDict):
    schema_version: int
    backends: list[str]
    count: int
    delegated_partitions: int
    fallback_partitions: int
    delegated_nodes: int
    fallback_nodes: int
    by_backend: dict[str, int]
    partitions: list[PartitionRow]
    boundaries: list[Boundary]
    boundary_bytes: int
    fallback_tax_ms: float
    fallback_tax_how: str
    splits: list[Split]
    layout_conversions: int
    quant_conversions: QuantConversions
    control_flow: NotRequired[list[ControlFlow]]


class PartitionsFile(PartitionReport):
    """An artefact's partitions.json: the report and each node's partition and backend."""

    assignment: list[int]
    partition_backends: list[str]


class MemoryReport(MemorySummary):
    schedule: ScheduleFile


class PartitionCommandReport(PartitionReport):
    """``guard partition --json``: the report, the memory plan's numbers and, when code is
    generated, [node, kernel symbol, op] per step."""

    memory: MemoryReport
    kernels: NotRequired[list[list[str]]]
