"""The bundled artefact: a self-contained directory, no pickle.

```
artefact.json       schema_version, compiler {name, version, pipeline, target, profile},
                    inputs/outputs, headline numbers, and the sha256 of every file below
graph.txt           the optimised graph in the IR text form (large constants "external")
weights.bin         every constant, 64-byte aligned, in one flat binary
weights.json        the index: name, offset, nbytes, dtype, shape, sha256 per constant
partitions.json     the partition report, plus the node -> partition assignment
memory_plan.json    the frozen MemoryPlan (order, offsets, buffers, elided nodes)
```

``artefact.json`` is the artefact's own manifest; guard's pipeline writes its pinned
``manifest.json`` beside it. Loading checks schema_version, the sha256 of every file and
of every constant, and that the plan matches the graph (same node count, every arena
tensor has a slot); anything else is refused with a message naming the file and what to
do (rebuild the artefact).
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from guard.compiler.memory import MemoryPlan
from guard.compiler.plan import COMPILER_NAME, CompiledPlan, plan
from guard.compiler.runtime import Executor, Runtime
from guard.compiler.schedule import view_of_graph
from guard.compiler.weights import WEIGHTS_SCHEMA_VERSION, WeightsLayout, pack_weights
from guard.errors import ModelError

SCHEMA_VERSION = 1
KIND = "guard-bundled-artefact"
FILES = ("graph.txt", "weights.bin", "weights.json", "partitions.json", "memory_plan.json")
MANIFEST = "artefact.json"


def _sha256(path: Path) -> str:
    h = hashlib.sha256()
    with path.open("rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def _dump(path: Path, data: Any) -> None:
    path.write_text(json.dumps(data, indent=1, sort_keys=True) + "\n")


def compiler_version() -> str:
    import guard

    return str(getattr(guard, "__version__", "0"))


def save_artefact(
    plan_or_graph: Any,
    out_dir: str | Path,
    *,
    pipeline: str = "O2",
    target: str = "host",
    profile: str | Path | None = None,
) -> dict[str, Any]:
    """Write the artefact for a CompiledPlan (or an IR graph, planned here); the manifest."""
    from guard.compiler import print_graph

    compiled = (
        plan_or_graph if isinstance(plan_or_graph, CompiledPlan) else plan(plan_or_graph, profile)
    )
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    graph = compiled.graph
    (out / "graph.txt").write_text(print_graph(graph))
    blob, layout = pack_weights({k: c.data for k, c in graph.constants.items()})
    (out / "weights.bin").write_bytes(blob.tobytes())
    _dump(out / "weights.json", layout.to_dict())
    parts = {
        **dict(compiled.partition_report),
        "assignment": list(compiled.partitions.group_of),
        "partition_backends": [p.backend for p in compiled.partitions.partitions],
    }
    _dump(out / "partitions.json", parts)
    _dump(
        out / "memory_plan.json",
        {**compiled.memory.to_dict(), "schedule": compiled.schedule.to_dict()},
    )
    view = compiled.view
    manifest = {
        "schema_version": SCHEMA_VERSION,
        "kind": KIND,
        "compiler": {
            "name": COMPILER_NAME,  # the same pins as BundledBackend.versions()
            "version": compiler_version(),
            "pipeline": pipeline,
            "target": target,
            "profile": compiled.profile,
        },
        "inputs": {
            i: {"shape": list(view.tensors[i].shape), "dtype": view.tensors[i].dtype}
            for i in view.inputs
        },
        "outputs": {
            o: {"shape": list(view.tensors[o].shape), "dtype": view.tensors[o].dtype}
            for o in view.outputs
        },
        "partitions": {
            "count": parts["count"],
            "delegated_partitions": parts["delegated_partitions"],
            "delegated_nodes": parts["delegated_nodes"],
            "fallback_nodes": parts["fallback_nodes"],
        },
        "arena_bytes": compiled.memory.arena_bytes,
        "arena_lower_bound_bytes": compiled.memory.lower_bound_bytes,
        "weights_bytes": layout.total_bytes,
        "files": {name: _sha256(out / name) for name in FILES},
    }
    _dump(out / MANIFEST, manifest)
    return manifest


@dataclass(frozen=True)
class LoadedArtefact:
    """A validated artefact: the graph, its frozen plans, and a way to run it."""

    path: Path
    manifest: dict[str, Any]
    graph: Any
    partitions: dict[str, Any]
    memory: MemoryPlan
    weights_blob: np.ndarray
    weights_layout: WeightsLayout

    def runtime(self, executors: dict[str, Executor] | None = None) -> Runtime:
        view = view_of_graph(self.graph)
        return Runtime(
            view,
            self.memory,
            tuple(self.partitions["assignment"]),
            tuple(self.partitions["partition_backends"]),
            self.weights_blob,
            self.weights_layout,
            executors,
        )


def _refuse(path: Path, msg: str) -> ModelError:
    return ModelError(msg, where=str(path), hint="Rebuild the artefact (guard run rebuilds it).")


def load_artefact(art_dir: str | Path) -> LoadedArtefact:
    """Validate and load an artefact directory; refuses a tampered or foreign one."""
    from guard.compiler import parse_graph

    root = Path(art_dir)
    mpath = root / MANIFEST
    if not mpath.is_file():
        raise _refuse(mpath, f"no {MANIFEST}: not a bundled artefact")
    try:
        manifest = json.loads(mpath.read_text())
    except json.JSONDecodeError as exc:
        raise _refuse(mpath, f"manifest is not valid JSON ({exc})") from exc
    if manifest.get("kind") != KIND:
        raise _refuse(mpath, f"kind is {manifest.get('kind')!r}, expected {KIND!r}")
    if manifest.get("schema_version") != SCHEMA_VERSION:
        raise _refuse(
            mpath,
            f"schema_version {manifest.get('schema_version')!r} is not {SCHEMA_VERSION}, the "
            "version this guard reads",
        )
    files = manifest.get("files", {})
    for name in FILES:
        p = root / name
        if name not in files:
            raise _refuse(mpath, f"the manifest lists no sha256 for {name}")
        if not p.is_file():
            raise _refuse(p, "file is missing")
        got = _sha256(p)
        if got != files[name]:
            raise _refuse(
                p,
                f"sha256 mismatch: the file was changed after the build (expected {files[name][:12]}…, got {got[:12]}…)",
            )
    index = json.loads((root / "weights.json").read_text())
    blob = np.fromfile(root / "weights.bin", np.uint8)
    if (
        index.get("schema_version") != WEIGHTS_SCHEMA_VERSION
        or index.get("total_bytes") != blob.size
    ):
        raise _refuse(root / "weights.json", "weights index does not describe weights.bin")
    layout = WeightsLayout.from_dict(index)
    for entry in layout.entries:
        if entry.offset + entry.nbytes > blob.size:
            raise _refuse(
                root / "weights.json", f"constant {entry.name!r} lies past the end of weights.bin"
            )
        if (
            hashlib.sha256(blob[entry.offset : entry.offset + entry.nbytes].tobytes()).hexdigest()
            != entry.sha256
        ):
            raise _refuse(
                root / "weights.bin", f"constant {entry.name!r} does not match its sha256"
            )
    weights = {
        e.name: blob[e.offset : e.offset + e.nbytes].view(np.dtype(e.dtype)).reshape(e.shape)
        for e in layout.entries
    }
    graph = parse_graph((root / "graph.txt").read_text(), weights=weights)
    try:
        memory = MemoryPlan.from_dict(json.loads((root / "memory_plan.json").read_text()))
    except (ValueError, KeyError, TypeError) as exc:
        raise _refuse(root / "memory_plan.json", f"memory plan unreadable: {exc}") from exc
    partitions = json.loads((root / "partitions.json").read_text())
    view = view_of_graph(graph)
    if sorted(memory.order) != list(range(len(view.nodes))) or len(
        partitions.get("assignment", [])
    ) != len(view.nodes):
        raise _refuse(root / "memory_plan.json", "the plan does not match graph.txt (node count)")
    missing = [t for t in view.arena_tensors() if t not in memory.slots]
    if missing:
        raise _refuse(root / "memory_plan.json", f"no arena slot for tensor {missing[0]!r}")
    return LoadedArtefact(root, manifest, graph, partitions, memory, blob, layout)
