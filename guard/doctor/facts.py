"""The facts the doctor reads: one result's fields, its artefact's records, the host's caches.

A side's result is read through the typed results tree (``Side.r``, a
guard.results.result.Result): a fact that is not recorded (a key absent or null) is None,
so a step can say ``unknown: <field>`` instead of guessing. Nothing here judges; the steps do.
``Context`` is what every step may read besides the two results (the host, the suite).
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypedDict

import onnx

from guard.core.fsutil import file_sha256
from guard.core.json_types import Json
from guard.results.documents import ResultsDocument
from guard.results.result import Result
from guard.run.case import resolve_model
from guard.suite import load_suite

SYSFS_CACHE = Path("/sys/devices/system/cpu/cpu0/cache")


@dataclass
class Side:
    """One result (one model, backend, target) of one side of the comparison."""

    label: str  # "base" or "head"
    r: Result  # the result
    d: ResultsDocument = field(default_factory=ResultsDocument)  # its document

    @property
    def has_manifest(self) -> bool:
        """Whether the result carries a manifest (an error before the build has none)."""
        return bool(self.r.manifest.to_json())

    @property
    def artefact(self) -> Path | None:
        a = self.r.artefact
        p = Path(a) if a else None
        return p if p is not None and p.is_dir() else None

    def artefact_json(self, name: str) -> Any:
        """A JSON record kept in the result's artefact directory, when it is still here."""
        art = self.artefact
        if art is None or not (art / name).is_file():
            return None
        try:
            return json.loads((art / name).read_text())
        except (OSError, json.JSONDecodeError):
            return None

    def check_status(self, name: str) -> str | None:
        """The status of the result's first check called ``name``, or None."""
        c = self.r.check(name)
        return c.status if c is not None else None


def model_file(doc: ResultsDocument, result: Result) -> Path | None:
    """The result's model file, found through the suite the results document names, when
    its sha256 matches the manifest's (so it is the model that was built)."""
    sp = doc.suite_path
    want = result.manifest.model.sha256
    if not sp or not want or not Path(sp).is_file():
        return None
    try:
        suite = load_suite(Path(sp))
        entry = next((m for m in suite.models if m.name == result.model), None)
        if entry is None:
            return None
        p = resolve_model(entry)
        return p if p.is_file() and file_sha256(p) == want else None
    except Exception:  # noqa: BLE001 - a suite that changed since is a missing fact
        return None


@dataclass
class Context:
    """What every step may read besides the two results."""

    caches: list[HostCache] = field(default_factory=list)
    host_cpu: str | None = None
    suite_path: str | None = None

    def model_path(self, side: Side) -> Path | None:
        return model_file(side.d, side.r)

    def model_source(self, side: Side) -> str | None:
        p = self.model_path(side)
        return str(p) if p is not None else None


@dataclass(frozen=True)
class Split:
    """A node the graph was split at: its name and op, the backend it ran on, and why each
    delegate declined it ({backend: why}), as a split record ({node, op, backend,
    declined}) says (a key it lacks is None, no reasons ``{}``)."""

    node: str | None = None
    op: str | None = None
    backend: str | None = None
    declined: Mapping[str, str] = field(default_factory=dict)

    @classmethod
    def of(cls, rec: Mapping[str, Json]) -> Split:
        return cls(rec.get("node"), rec.get("op"), rec.get("backend"), rec.get("declined") or {})


def splits(side: Side) -> tuple[list[Split] | None, str]:
    """Per split node its :class:`Split`, and where it was read.

    Results may carry ``partitions.splits``; the bundled artefact keeps them in
    ``partitions.json``. Without either, single-node fallback partitions still name their
    node and op (from ``partitions.details``), without the reason.
    """
    parts = side.r.partitions
    rec = parts.splits if parts else None
    if rec is not None:
        return [Split.of(dict(s)) for s in rec], "result partitions.splits"
    pj = side.artefact_json("partitions.json")
    if isinstance(pj, Mapping) and isinstance(pj.get("splits"), list):
        return [Split.of(dict(s)) for s in pj["splits"]], f"{side.artefact}/partitions.json"
    details = parts.details if parts else ()
    if details and details[0].delegated is not None:
        out: list[Split] = []
        for d in details:
            if not d.delegated and d.first == d.last and d.nodes == 1:
                op = next(iter(d.ops), None)
                out.append(Split(d.first, op, d.backend))
        return out, "result partitions.details (single-node fallback partitions; no reasons)"
    return None, ""


def layout_notes(side: Side) -> list[str]:
    """The layout pass's per-region notes (which region got which layout, and why)."""
    notes: list[str] = []
    graph = side.r.graph
    for p in (graph.passes if graph else None) or ():
        if p.name == "assign_layout":
            notes += [str(n) for n in p.notes if "conversions inserted" in str(n)]
    return notes


def optimised_onnx_ops(side: Side) -> dict[str, int] | None:
    """Op counts of onnxruntime's optimised graph (the artefact's payload), when here."""
    art = side.artefact
    if art is None or not (art / "model.opt.onnx").is_file():
        return None
    try:
        m = onnx.load(str(art / "model.opt.onnx"), load_external_data=False)
    except Exception:  # noqa: BLE001 - a damaged payload is a missing fact, not a crash
        return None
    ops: dict[str, int] = {}
    for n in m.graph.node:
        # ORT's NCHWc kernels are Conv/ReorderInput in com.microsoft.nchwc: keep the domain.
        op = n.op_type if n.domain in ("", "ai.onnx") else f"{n.domain}.{n.op_type}"
        ops[op] = ops.get(op, 0) + 1
    return dict(sorted(ops.items()))


# -- the host's caches ----------------------------------------------------------------------

_SIZE = re.compile(r"^\s*(\d+)\s*([KMG]?)\s*$", re.IGNORECASE)


def _size_bytes(text: str) -> int | None:
    m = _SIZE.match(text)
    if not m:
        return None
    return int(m.group(1)) * {"": 1, "K": 1024, "M": 1024**2, "G": 1024**3}[m.group(2).upper()]


def _cpu_count(cpu_list: str) -> int:
    n = 0
    for part in cpu_list.strip().split(","):
        if not part:
            continue
        lo, _, hi = part.partition("-")
        n += (int(hi) - int(lo) + 1) if hi else 1
    return n


class HostCacheJson(TypedDict):
    """A cache level as the doctor document's ``host_caches`` writes it."""

    name: str
    level: int
    type: str | None
    bytes: int
    shared_cpus: int


@dataclass(frozen=True)
class HostCache:
    """One data or unified cache level: ``name`` is L1d, L2, L3...; ``shared_cpus`` is how
    many CPUs share one instance (1 = per core)."""

    name: str
    level: int
    type: str | None  # sysfs's Data or Unified (a recorded cache: None where it has none)
    bytes: int
    shared_cpus: int

    def to_dict(self) -> HostCacheJson:
        """{name, level, type, bytes, shared_cpus}: the doctor document's ``host_caches``."""
        return {"name": self.name, "level": self.level, "type": self.type,
                "bytes": self.bytes, "shared_cpus": self.shared_cpus}  # fmt: skip


def host_caches(root: Path = SYSFS_CACHE) -> list[HostCache]:
    """Data and unified caches of cpu0 from sysfs, smallest level first (an unreadable
    sysfs gives an empty list)."""
    out = []
    for d in sorted(root.glob("index*")) if root.is_dir() else []:
        try:
            level = int((d / "level").read_text())
            ctype = (d / "type").read_text().strip()
            size = _size_bytes((d / "size").read_text())
            shared = _cpu_count((d / "shared_cpu_list").read_text())
        except (OSError, ValueError):
            continue
        if ctype == "Instruction" or size is None:
            continue
        name = f"L{level}d" if ctype == "Data" else f"L{level}"
        out.append(HostCache(name, level, ctype, size, shared))
    return sorted(out, key=lambda c: c.level)


def fits_in(nbytes: int, caches: list[HostCache]) -> str:
    """The smallest cache level that holds ``nbytes`` ("L2"), or "DRAM"."""
    for c in caches:
        if nbytes <= c.bytes:
            return str(c.name)
    return "DRAM"


def mib(n: int | float | None) -> str:
    if n is None:
        return "?"
    if n < 1024 * 1024:
        return f"{n / 1024:.1f} KiB"
    return f"{n / 2**20:.2f} MiB"
