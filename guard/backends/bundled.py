"""The ``bundled`` backend: guard's own compiler (guard/compiler), run by its reference
interpreter until part 2's partitioner, planner and runtime land.

Artefact layout (no pickle anywhere):

- ``graph.ir``      the optimised graph in the IR text form (the payload)
- ``weights.bin``   every constant too large to print inline, back to back, 64-byte aligned
- ``weights.json``  ``{"schema_version": 1, "file": "weights.bin", "tensors": {name:
                    {"offset", "nbytes", "dtype", "shape", "sha256"}}}``
- ``bundled.json``  ``{"schema_version": 1, "pipeline", "graph": <graph diff>, "memory"}``

Loading checks every weight's sha256, so a tampered or truncated artefact fails loudly.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
from pathlib import Path
from typing import Any

import numpy as np

import guard
from guard.backends.base import BuildInfo, BuildRequest, MemoryInfo, PartitionInfo
from guard.errors import ModelError

PAYLOAD = "graph.ir"
WEIGHTS = "weights.bin"
INDEX = "weights.json"
META = "bundled.json"
ALIGN = 64
RUNTIME = "guard-reference"


def _liveness(graph: Any) -> tuple[int, int]:
    """(peak live intermediate bytes over plain topological order, naive sum)."""
    from guard.compiler.ir import Constant

    last: dict[str, int] = {}
    for idx, n in enumerate(graph.nodes):
        for i in n.inputs:
            last[i] = idx
    end = len(graph.nodes)
    for o in graph.outputs:
        last[o] = end
    live: dict[str, int] = {}
    peak = naive = 0
    for idx, n in enumerate(graph.nodes):
        for o in n.outputs:
            v = graph.values[o]
            if isinstance(v, Constant):
                continue
            live[o] = v.nbytes
            naive += v.nbytes
        peak = max(peak, sum(live.values()))
        for name in [k for k in live if last.get(k, idx) <= idx]:
            del live[name]
    return peak, naive


def write_weights(graph: Any, out_dir: Path) -> None:
    from guard.compiler.text import INLINE_MAX_ELEMENTS

    index: dict[str, Any] = {}
    offset = 0
    with open(out_dir / WEIGHTS, "wb") as f:
        for name, c in graph.constants.items():
            if c.size <= INLINE_MAX_ELEMENTS:
                continue  # printed inline in graph.ir
            data = np.ascontiguousarray(c.data)
            raw = data.astype(data.dtype.newbyteorder("<"), copy=False).tobytes()
            pad = (-offset) % ALIGN
            f.write(b"\0" * pad)
            offset += pad
            f.write(raw)
            index[name] = {
                "offset": offset,
                "nbytes": len(raw),
                "dtype": data.dtype.str,
                "shape": list(data.shape),
                "sha256": hashlib.sha256(raw).hexdigest(),
            }
            offset += len(raw)
    (out_dir / INDEX).write_text(
        json.dumps(
            {"schema_version": 1, "file": WEIGHTS, "tensors": index}, indent=1, sort_keys=True
        )
    )


def read_weights(artefact_dir: Path) -> dict[str, np.ndarray]:
    where = str(artefact_dir / INDEX)
    try:
        index = json.loads((artefact_dir / INDEX).read_text())
    except (OSError, ValueError) as exc:
        raise ModelError(
            f"cannot read the weight index: {exc}",
            where=where,
            hint="Rebuild the artefact with `guard run`.",
        ) from exc
    if index.get("schema_version") != 1:
        raise ModelError(
            f"unsupported schema_version {index.get('schema_version')!r}",
            where=where,
            hint="Rebuild the artefact with this guard version.",
        )
    blob = np.fromfile(artefact_dir / index["file"], dtype=np.uint8)
    out: dict[str, np.ndarray] = {}
    for name, t in index["tensors"].items():
        raw = blob[t["offset"] : t["offset"] + t["nbytes"]]
        if raw.size != t["nbytes"] or hashlib.sha256(raw.tobytes()).hexdigest() != t["sha256"]:
            raise ModelError(
                f"weight {name!r} does not match its sha256 (corrupt or truncated)",
                where=where,
                hint="Rebuild the artefact with `guard run`.",
            )
        out[name] = (
            raw.view(np.dtype(t["dtype"]))
            .reshape(t["shape"])
            .astype(np.dtype(t["dtype"]).newbyteorder("="), copy=False)
        )
    return out


class _NoLimit:
    def limit(self, **_: Any) -> contextlib.nullcontext[None]:
        return contextlib.nullcontext()


def _blas_controller() -> Any:
    # threadpoolctl arrives with scikit-learn (pinned); without it BLAS runs unlimited.
    try:
        from threadpoolctl import ThreadpoolController
    except ImportError:  # pragma: no cover - depends on the install
        return _NoLimit()
    return ThreadpoolController()


class BundledSession:
    """A loaded bundled artefact: the optimised graph in the reference interpreter."""

    def __init__(self, artefact_dir: Path, threads: int) -> None:
        from guard.compiler import parse_graph, verify

        self.dir = artefact_dir
        self.threads = threads
        self._blas = _blas_controller()
        meta = json.loads((artefact_dir / META).read_text())
        self.meta = meta
        self.graph = parse_graph((artefact_dir / PAYLOAD).read_text(), read_weights(artefact_dir))
        verify(self.graph)
        self.input_names = list(self.graph.inputs)
        self.output_names = list(self.graph.outputs)

    def run(self, feeds: dict[str, np.ndarray]) -> list[np.ndarray]:
        from guard.compiler import run_reference

        # numpy's BLAS pool gets exactly `threads`: an oversubscribed OpenBLAS on a busy
        # machine is 10-70x slower, which would measure the scheduler, not the model.
        with self._blas.limit(limits=self.threads, user_api="blas"):
            out = run_reference(self.graph, feeds)
        return [out[o] for o in self.output_names]

    def partitions(self) -> PartitionInfo:
        n = len(self.graph.nodes)
        profile = self.meta.get("profile")
        note = f"; delegate profile {profile!r} recorded, not applied yet" if profile else ""
        return PartitionInfo(
            count=1,
            delegated_nodes=n,
            fallback_nodes=0,
            by_provider={RUNTIME: n},
            details=[{"provider": RUNTIME, "nodes": n}],
            how="the whole optimised graph runs as one partition in guard's numpy reference "
            f"interpreter (until the part-2 partitioner lands){note}",
        )

    def memory(self) -> MemoryInfo:
        m = self.meta["memory"]
        return MemoryInfo(
            arena_bytes=m["arena_bytes"],
            lower_bound_bytes=m["lower_bound_bytes"],
            how="lower bound: peak bytes of live intermediates (node outputs, no aliasing) "
            "over the optimised graph's plain topological order; arena = naive sum of every "
            "intermediate (no planner yet; the reference interpreter allocates per node)",
        )


class BundledBackend:
    name = "bundled"

    def versions(self) -> tuple[dict[str, Any], dict[str, Any]]:
        compiler = {"name": "guard-compiler", "version": guard.__version__}
        runtime = {"name": RUNTIME, "version": guard.__version__, "numpy": np.__version__}
        return compiler, runtime

    def build(self, req: BuildRequest) -> BuildInfo:
        from guard.compiler import graph_diff, import_onnx, optimize, print_graph, verify
        from guard.compiler.pipeline import pipeline_names

        opts = dict(req.options)
        pipeline = str(opts.pop("pipeline", "O2"))
        # A delegate profile is the partitioner's input (part 2); recorded, not yet applied.
        profile = opts.pop("profile", None)
        if opts:
            raise ModelError(
                f"options.bundled: unknown option(s) {sorted(opts)}",
                where=str(req.model_path),
                hint="Known: pipeline, profile.",
            )
        if pipeline not in pipeline_names():
            raise ModelError(
                f"options.bundled.pipeline: unknown pipeline {pipeline!r}",
                where=str(req.model_path),
                hint=f"Use one of: {', '.join(pipeline_names())}.",
            )
        graph = import_onnx(req.model_path, dict(req.input_shapes))
        optimized, report = optimize(graph, pipeline)
        verify(optimized)
        diff = graph_diff(graph, optimized, report)
        (req.out_dir / PAYLOAD).write_text(print_graph(optimized))
        write_weights(optimized, req.out_dir)
        lower, naive = _liveness(optimized)
        meta = {
            "schema_version": 1,
            "pipeline": pipeline,
            "graph": diff,
            "profile": profile,
            "memory": {"arena_bytes": naive, "lower_bound_bytes": lower},
        }
        (req.out_dir / META).write_text(json.dumps(meta, indent=1, sort_keys=True))
        compiler, runtime = self.versions()
        compiler["pipeline"] = pipeline
        return BuildInfo(
            payload=PAYLOAD,
            compiler=compiler,
            runtime=runtime,
            session_options={"threads": req.threads, "pipeline": pipeline},
            graph=diff,
        )

    def load(self, artefact_dir: Path, threads: int) -> BundledSession:
        return BundledSession(Path(artefact_dir), threads)
