"""The bundled artefact: a self-contained directory, no pickle.

```
artefact.json       schema_version, compiler {name, version, pipeline, target, profile},
                    inputs/outputs, headline numbers, and the sha256 of every file below
graph.txt           the optimised graph in the IR text form (large constants "external")
weights.bin         every constant, 64-byte aligned, in one flat binary
weights.json        the index: name, offset, nbytes, dtype, shape, sha256 per constant
partitions.json     the partition report, plus the node -> partition assignment
memory_plan.json    the frozen MemoryPlan (order, offsets, buffers, elided nodes)
kernels.o           object code for the target (generated native partitions), when any
kernels.ll          the optimised LLVM IR of kernels.o (diffable text between two builds)
kernels.json        the kernel plan: per native partition its entry and, per step, the
                    node, the kernel symbol and the operands' (space, offset, shape, dtype)
packed.bin          constants re-laid for their kernels (e.g. conv weights by K block)
sub/N_ATTR/         control flow: each If branch or Loop body, an artefact of its own; the
                    node's attribute in graph.txt names it, artefact.json its manifest's sha256
```

Loading maps kernels.o with llvmlite (MCJIT over an empty module): nothing is compiled at
load. An object built for another architecture or for CPU features this machine lacks is
refused, naming both; so is any file whose sha256 differs from the manifest's. The
manifest is written last and removed first, so a build interrupted mid-way leaves no
artefact that looks complete.

``artefact.json`` is the artefact's own manifest; guard's pipeline writes its pinned
``manifest.json`` beside it. Loading checks schema_version, the sha256 of every file and
of every constant, and that the plan matches the graph (same node count, every arena
tensor has a slot); anything else is refused with a message naming the file and what to
do (rebuild the artefact).
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

import guard
from guard.compiler import parse_graph, print_graph
from guard.compiler.codegen.build import NativeProgram, generate
from guard.compiler.codegen.kernel_plan import KernelPlan
from guard.compiler.codegen.llvm_target import CodegenTarget, codegen_target, runnable_here
from guard.compiler.graph.memory import MemoryPlan
from guard.compiler.graph.view import view_of_graph
from guard.compiler.ir.core import Graph, Node
from guard.compiler.partition.plan import COMPILER_NAME, CompiledPlan, plan
from guard.compiler.partition.report_json import PartitionsFile
from guard.compiler.runtime.artefact_json import ArtefactManifest, MemoryBudget
from guard.compiler.runtime.control import control_executor
from guard.compiler.runtime.engine import Executor, Runtime
from guard.compiler.runtime.weights import WEIGHTS_SCHEMA_VERSION, WeightsLayout, pack_weights
from guard.core.errors import ModelError
from guard.core.fsutil import atomic_write_text
from guard.core.json_types import JsonObject

SCHEMA_VERSION = 2  # 2: generated code (kernels.o/.ll/.json, packed.bin, codegen pins)
KIND = "guard-bundled-artefact"
FILES = ("graph.txt", "weights.bin", "weights.json", "partitions.json", "memory_plan.json")
CODEGEN_FILES = ("kernels.o", "kernels.ll", "kernels.json", "packed.bin")
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
    return str(getattr(guard, "__version__", "0"))


def save_artefact(
    plan_or_graph: CompiledPlan | Graph,
    out_dir: str | Path,
    *,
    pipeline: str = "O2",
    target: str = "host",
    profile: str | Path | None = None,
    budget: MemoryBudget | None = None,
) -> dict[str, Any]:  # an ArtefactManifest (guard.backends.bundled indexes its codegen)
    """Write the artefact for a CompiledPlan (or an IR graph, planned here); the manifest.

    ``budget`` (guard.compiler.fit.ladder.Ladder.to_dict) is kept whole in the manifest's
    ``memory_budget`` and its bytes and rung are pinned among the compiler's pins: the same
    budget needing a higher rung is a visible change."""
    compiled = (
        plan_or_graph if isinstance(plan_or_graph, CompiledPlan) else plan(plan_or_graph, profile)
    )
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    (out / MANIFEST).unlink(missing_ok=True)  # until the new one is written, not an artefact
    graph = compiled.graph
    subgraphs = _write_subgraphs(compiled, out, pipeline=pipeline, target=target)
    (out / "graph.txt").write_text(print_graph(_with_refs(compiled, subgraphs)))
    blob, layout = pack_weights({k: c.data for k, c in graph.constants.items()})
    (out / "weights.bin").write_bytes(blob.tobytes())
    _dump(out / "weights.json", layout.to_dict())
    parts: PartitionsFile = {
        **compiled.partition_report,
        "assignment": list(compiled.partitions.group_of),
        "partition_backends": [p.backend for p in compiled.partitions.partitions],
    }
    _dump(out / "partitions.json", parts)
    _dump(
        out / "memory_plan.json",
        {**compiled.memory.to_dict(), "schedule": compiled.schedule.to_dict()},
    )
    view = compiled.view
    codegen = None
    files = list(FILES)
    if any(p.backend == "native" for p in compiled.partitions.partitions):
        codegen = _write_native(compiled, layout, target, out)
        files += CODEGEN_FILES
    manifest: ArtefactManifest = {
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
        "codegen": codegen,
        "files": {name: _sha256(out / name) for name in files},
    }
    if budget is not None:
        manifest["memory_budget"] = budget
        manifest["compiler"]["memory_budget"] = {"bytes": budget["bytes"], "rung": budget["rung"]}
    if subgraphs:
        manifest["subgraphs"] = {
            rel: _sha256(out / rel / MANIFEST) for rel in sorted(set(subgraphs.values()))
        }

    atomic_write_text(out / MANIFEST, json.dumps(manifest, indent=1, sort_keys=True) + "\n")
    return dict(manifest)


def _write_subgraphs(
    compiled: CompiledPlan, out: Path, *, pipeline: str, target: str
) -> dict[str, str]:
    """Each branch or loop body as an artefact of its own under ``sub/``; key -> its path."""
    refs = {}
    for k, (key, sub) in enumerate(sorted(compiled.subplans.items())):
        rel = f"sub/{k}_{key.rsplit('/', 1)[1]}"
        save_artefact(sub, out / rel, pipeline=pipeline, target=target)
        refs[key] = rel
    return refs


def _with_refs(compiled: CompiledPlan, refs: dict[str, str]) -> Graph:
    """The graph to print: a body in a node's attributes becomes the path of its artefact."""
    if not refs:
        return compiled.graph
    g = Graph(compiled.graph.name)
    g.inputs, g.outputs, g.values = (
        compiled.graph.inputs,
        compiled.graph.outputs,
        compiled.graph.values,
    )
    for n, v in zip(compiled.graph.nodes, compiled.view.nodes, strict=True):
        attrs = {a: refs.get(f"{v.name}/{a}", x) for a, x in n.attrs.items()}
        g.nodes.append(Node(n.op, n.inputs, n.outputs, attrs, n.name))
    return g


def _write_native(
    compiled: CompiledPlan, layout: WeightsLayout, target: str, out: Path
) -> JsonObject:
    """Generate, write kernels.o/.ll/.json and packed.bin; the manifest's codegen pins."""
    import llvmlite
    import llvmlite.binding as llvm

    tgt = codegen_target(target)
    code = generate(compiled, layout, tgt)
    (out / "kernels.o").write_bytes(code.generated.object_code)
    (out / "kernels.ll").write_text(code.generated.ir_text)
    _dump(out / "kernels.json", code.plan.to_dict())
    (out / "packed.bin").write_bytes(code.packed.tobytes())
    return {
        "llvmlite": llvmlite.__version__,
        "llvm": ".".join(str(v) for v in llvm.llvm_version_info),
        **tgt.to_dict(),
        "kernels": code.generated.kernels,
        "steps": len(code.plan.steps()),
        "compile_s": round(code.generated.compile_s, 3),
    }


@dataclass(frozen=True)
class LoadedArtefact:
    """A validated artefact: the graph, its frozen plans, and a way to run it."""

    path: Path
    manifest: ArtefactManifest
    graph: Any
    partitions: PartitionsFile
    memory: MemoryPlan
    weights_blob: np.ndarray
    weights_layout: WeightsLayout
    native: Any = None  # guard.compiler.codegen.build.NativeProgram, when generated
    subs: dict[str, LoadedArtefact] = field(default_factory=dict)  # sub/... -> a body's artefact

    def programs(self) -> list[Any]:
        """The generated code of this artefact and of every branch or loop body in it."""
        own = [self.native] if self.native is not None else []
        return own + [p for sub in self.subs.values() for p in sub.programs()]

    def runtime(self, executors: dict[str, Executor] | None = None) -> Runtime:
        view = view_of_graph(self.graph)
        if self.subs:  # control flow: the host calls each body's own runtime
            executors = {
                "cpu": control_executor({rel: a.runtime() for rel, a in self.subs.items()}),
                **(executors or {}),
            }
        return Runtime(
            view,
            self.memory,
            tuple(self.partitions["assignment"]),
            tuple(self.partitions["partition_backends"]),
            self.weights_blob,
            self.weights_layout,
            executors,
            native=self.native,
        )


def _refuse(path: Path, msg: str) -> ModelError:
    return ModelError(msg, where=str(path), hint="Rebuild the artefact (guard run rebuilds it).")


def _changed_file(root: Path, manifest: JsonObject) -> tuple[Path, str] | None:
    """The first file whose sha256 is not the one ``artefact.json`` recorded, and how
    (``manifest`` as parsed: this is part of its validation)."""
    files = manifest.get("files", {})
    if not isinstance(files, dict):
        return root / MANIFEST, "the manifest's files are not a mapping"
    for name in (*FILES, *(CODEGEN_FILES if manifest.get("codegen") else ())):
        p = root / name
        if name not in files:
            return root / MANIFEST, f"the manifest lists no sha256 for {name}"
        if not p.is_file():
            return p, "file is missing"
        got = _sha256(p)
        if got != files[name]:
            return p, (
                f"sha256 mismatch: the file was changed after the build (expected "
                f"{str(files[name])[:12]}…, got {got[:12]}…)"
            )
    return None


def verify_artefact(art_dir: str | Path) -> str | None:
    """What differs from what the build recorded in ``artefact.json`` (one line), or None."""
    root = Path(art_dir)
    try:
        manifest = json.loads((root / MANIFEST).read_text())
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        return f"{MANIFEST} is unreadable ({type(exc).__name__})"
    if not isinstance(manifest, dict):
        return f"{MANIFEST} is not an object"
    changed = _changed_file(root, manifest)
    return None if changed is None else f"{changed[0].name}: {changed[1]}"


def load_artefact(art_dir: str | Path, *, native: bool = True) -> LoadedArtefact:
    """Validate and load an artefact directory; refuses a tampered or foreign one."""
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
    codegen = manifest.get("codegen")
    changed = _changed_file(root, manifest)
    if changed is not None:
        raise _refuse(*changed)
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
    # native=False: verified but not mapped (guard.emulate runs a foreign object itself).
    program = _load_native(root, codegen) if codegen and native else None
    subs = {}
    for rel, sha in dict(manifest.get("subgraphs") or {}).items():
        sub_manifest = root / rel / MANIFEST
        if not sub_manifest.is_file() or _sha256(sub_manifest) != sha:
            raise _refuse(
                sub_manifest, "a branch's artefact is missing or differs from the build's"
            )
        subs[rel] = load_artefact(root / rel, native=native)
    return LoadedArtefact(root, manifest, graph, partitions, memory, blob, layout, program, subs)


def _load_native(root: Path, codegen: JsonObject) -> Any:
    """Map kernels.o (no compilation), after checking it can run on this machine."""
    built = CodegenTarget(str(codegen["triple"]), str(codegen["cpu"]), tuple(codegen["features"]))
    why = runnable_here(built)
    if why:
        raise ModelError(
            f"kernels.o cannot run here: {why}",
            where=str(root / "kernels.o"),
            hint="Build the artefact for this machine's target (or run it on the target it was built for).",
        )
    try:
        plan = KernelPlan.from_dict(json.loads((root / "kernels.json").read_text()))
    except (ValueError, KeyError, TypeError) as exc:
        raise _refuse(root / "kernels.json", f"kernel plan unreadable: {exc}") from exc
    packed = np.fromfile(root / "packed.bin", np.uint8)
    if packed.size != plan.packed_bytes:
        raise _refuse(root / "packed.bin", "size does not match the kernel plan")
    return NativeProgram(plan, packed, (root / "kernels.o").read_bytes(), built)
