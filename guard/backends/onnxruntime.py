"""The onnxruntime backend: fixed, recorded session options; the optimised model as payload.

Partitions come from ORT's own record of which execution provider each node of the
optimised graph was assigned to (``session.record_ep_graph_assignment_info``), grouped by
the compiler's partition grouping (guard.compiler.graph.grouping): connected same-provider
subgraphs that keep the collapsed graph acyclic, then merged per provider while it stays
acyclic. Memory comes from a profiled probe at build time (guard.backends.ort_memory): the
liveness lower bound over ORT's executed node order, and the bytes ORT's CPU arena
reserved across the probe's inferences.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
import onnx

from guard.backends.base import (
    BuildInfo,
    BuildRequest,
    KernelRow,
    MemoryInfo,
    PartitionDetail,
    PartitionInfo,
    PartitionsJson,
)
from guard.backends.ort_memory import probe_memory
from guard.backends.ort_session import (
    FALLBACK_PROVIDER,
    _classify_ort_error,
    _ort,
    _ort_text,
    session_options,
)
from guard.compiler.graph.grouping import group_connected, merge_while_acyclic
from guard.core.errors import ModelError, UsageError
from guard.core.json_types import JsonObject
from guard.core.schema import Schema
from guard.manifest.written import ComponentPins

if TYPE_CHECKING:
    import onnxruntime

PAYLOAD = "model.opt.onnx"
META = "ort.json"
SCHEMA_VERSION = 1
_META = Schema("onnxruntime artefact metadata", SCHEMA_VERSION, "Rebuild the artefact.")


class OrtSession:
    """A loaded ORT artefact."""

    def __init__(self, artefact_dir: Path, threads: int, *, source: Path | None = None):
        ort = _ort()
        meta = self._meta = _META.load(artefact_dir / META)
        # The payload is already optimised; keep the same level so that what runs is what
        # was recorded (re-applying passes to an optimised graph is idempotent).
        level = meta["session_options"]["graph_optimization_level"]
        so = session_options(threads, level)
        try:
            self._sess = ort.InferenceSession(
                str(source or artefact_dir / PAYLOAD), so,
                providers=meta["session_options"]["providers"],
            )  # fmt: skip
        except Exception as exc:  # noqa: BLE001 - ORT raises its own exception zoo
            raise _classify_ort_error(exc, artefact_dir / PAYLOAD) from None
        self.input_names = [i.name for i in self._sess.get_inputs()]
        self.output_names = [o.name for o in self._sess.get_outputs()]
        self._where = str(artefact_dir / PAYLOAD)
        self._threads = threads

    def run(self, feeds: dict[str, np.ndarray]) -> list[np.ndarray]:
        try:
            return self._sess.run(None, feeds)
        except Exception as exc:  # noqa: BLE001 - ORT raises its own exception zoo
            # A model that loads but fails at run time (a Reshape to an impossible shape,
            # an index out of range) is the model's problem: exit 2, naming it.
            raise ModelError(
                f"onnxruntime failed running the model: {_ort_text(exc)}", where=self._where
            ) from None

    def bound_run(self, feeds: dict[str, np.ndarray]) -> Callable[[], None]:
        """A call that runs one inference on ``feeds`` with inputs and outputs bound once.

        A counted run (guard.counting.child) counts this call: no numpy arrays are
        converted in or allocated out per call, so what is counted is the inference, the
        same in every process, not Python's and the binding's allocation history."""
        ort = _ort()
        outputs = self.run(feeds)  # the output shapes; also a warm-up
        binding = self._sess.io_binding()
        keep = []  # the OrtValues live as long as the call
        for name in self.input_names:
            value = ort.OrtValue.ortvalue_from_numpy(np.ascontiguousarray(feeds[name]))
            binding.bind_ortvalue_input(name, value)
            keep.append(value)
        for name, out in zip(self.output_names, outputs, strict=True):
            value = ort.OrtValue.ortvalue_from_shape_and_type(list(out.shape), out.dtype.type)
            binding.bind_ortvalue_output(name, value)
            keep.append(value)
        sess, native, options = self._sess._sess, binding._iobinding, ort.RunOptions()

        def call() -> None:
            sess.run_with_iobinding(native, options)

        call.keep = keep  # type: ignore[attr-defined]
        return call

    def kernels(
        self, feeds: dict[str, np.ndarray], top: int = 10, runs: int = 5
    ) -> list[KernelRow]:
        """The top nodes by time from onnxruntime's own profiler (a second, profiled session
        of the same payload and options; guard.backends.ort_profile), beside the bundled
        backend's per-kernel times."""
        from guard.backends.ort_profile import profile_nodes

        opts = self._meta["session_options"]
        try:
            return profile_nodes(
                Path(self._where), opts["graph_optimization_level"], opts["providers"],
                self._threads, feeds, runs=runs, top=top,
            )  # fmt: skip
        except Exception as exc:  # noqa: BLE001 - ORT raises its own exception zoo
            raise ModelError(
                f"onnxruntime's profiler failed: {_ort_text(exc)}", where=self._where
            ) from None

    def partitions(self) -> PartitionInfo:
        return PartitionInfo.from_dict(self._meta["partitions"])

    def memory(self) -> MemoryInfo:
        return MemoryInfo.from_dict(self._meta["memory"])


def provider_groups(nodes: Sequence[onnx.NodeProto], ep: Sequence[str]) -> list[list[int]]:
    """Node indices per partition, ordered by their first node: ``nodes`` (in graph order)
    grouped by provider ``ep[i]`` with the compiler's grouping."""
    producer: dict[str, int] = {}
    for i, n in enumerate(nodes):
        for o in n.output:
            producer[o] = i
    preds = [
        sorted({producer[x] for x in n.input if producer.get(x, i) != i})
        for i, n in enumerate(nodes)
    ]
    groups, _ = group_connected(preds, ep)
    merge_while_acyclic(groups, ep)
    return sorted((sorted(m) for m in groups.members.values()), key=lambda m: m[0])


def _partitions(sess: Any, model: onnx.ModelProto) -> PartitionsJson:
    """Same-provider partitions of the optimised graph (see the module docstring)."""
    assigned: dict[str, str] = {}
    nodes = list(model.graph.node)
    recorded = hasattr(sess, "get_provider_graph_assignment_info")
    if recorded:
        for sg in sess.get_provider_graph_assignment_info():
            for n in sg.get_nodes():
                assigned[n.name] = sg.ep_name
    elif len(sess.get_providers()) > 1:
        raise UsageError(
            f"onnxruntime {_ort().__version__} does not record which provider runs each node "
            f"(session.get_provider_graph_assignment_info), so guard cannot count partitions "
            f"over {sess.get_providers()}",
            hint="Use one provider with this onnxruntime, or a newer onnxruntime.",
        )
    ep = [assigned.get(n.name, FALLBACK_PROVIDER) for n in nodes]
    merged = provider_groups(nodes, ep)
    by_provider: dict[str, int] = {}
    for e in ep:
        by_provider[e] = by_provider.get(e, 0) + 1
    # The first provider in priority order is the delegate; the rest is fallback (with the
    # CPU wheel, CPU is the only provider and everything is "delegated" to it).
    delegate = sess.get_providers()[0]
    delegated = by_provider.get(delegate, 0)
    details: list[PartitionDetail] = [
        {"provider": ep[g[0]], "nodes": len(g)} for g in sorted(merged, key=lambda g: -len(g))
    ]
    return {
        # Every partition counts, fallback ones included (as in the bundled compiler), so
        # `partitions: {max: 1}` cannot pass a graph that split across providers.
        "count": len(merged),
        "delegated_nodes": delegated,
        "fallback_nodes": len(nodes) - delegated,
        "by_provider": by_provider,
        "details": details,
        "how": (
            "ORT's recorded node-to-provider assignment (session.record_ep_graph_assignment_info)"
            if recorded
            else f"onnxruntime {_ort().__version__} records no node-to-provider assignment: its "
            f"one provider ({ep[0] if ep else FALLBACK_PROVIDER}) runs every node"
        )
        + " over the optimised graph: connected same-provider subgraphs (the collapsed graph "
        "kept acyclic), merged per provider while it stays acyclic; count = partitions on "
        "every provider.",
    }


class OnnxRuntimeBackend:
    name = "onnxruntime"

    def versions(self) -> tuple[ComponentPins, ComponentPins]:
        ort = _ort()
        version = str(ort.__version__)
        return {"name": "onnxruntime", "version": version}, {
            "name": "onnxruntime",
            "version": version,
        }

    def build(self, req: BuildRequest) -> BuildInfo:
        ort = _ort()
        opts = dict(req.options)
        level = str(opts.pop("graph_optimization_level", "all"))
        providers = list(opts.pop("providers", [FALLBACK_PROVIDER]))
        if opts:
            raise ModelError(
                f"options.onnxruntime: unknown option(s) {sorted(opts)}",
                hint="Known: graph_optimization_level, providers.",
            )
        unknown = [p for p in providers if p not in ort.get_available_providers()]
        if unknown:
            raise ModelError(
                f"options.onnxruntime.providers: {unknown} not available here",
                hint=f"Available: {ort.get_available_providers()}.",
            )
        payload = req.out_dir / PAYLOAD
        so = session_options(req.threads, level, optimized_path=payload)
        try:
            sess = ort.InferenceSession(str(req.model_path), so, providers=providers)
        except Exception as exc:  # noqa: BLE001
            raise _classify_ort_error(exc, req.model_path) from None
        # The optimised graph, read once: its edges give partitions and liveness.
        optimised = onnx.load(str(payload), load_external_data=False)
        partitions = _partitions(sess, optimised)
        memory = probe_memory(
            payload,
            optimised,
            req.threads,
            level,
            req.input_shapes,
            providers,
            work_dir=req.out_dir,
            inputs=req.inputs,
        )
        session_opts: JsonObject = {
            "graph_optimization_level": level,
            "intra_op_num_threads": req.threads,
            "inter_op_num_threads": 1,
            "execution_mode": "sequential",
            "allow_spinning": False,
            "providers": sess.get_providers(),
        }
        meta = {
            "schema_version": SCHEMA_VERSION,
            "session_options": session_opts,
            "partitions": partitions,
            "memory": memory,
        }
        (req.out_dir / META).write_text(json.dumps(meta, indent=2, sort_keys=True))
        compiler, runtime = self.versions()
        compiler["graph_optimization_level"] = level
        return BuildInfo(
            payload=PAYLOAD, compiler=compiler, runtime=runtime, session_options=session_opts
        )

    def load(self, artefact_dir: Path, threads: int) -> OrtSession:
        return OrtSession(artefact_dir, threads)


def reference_session(model_path: Path, threads: int = 1) -> onnxruntime.InferenceSession:
    """An ORT session with every graph optimisation off: the golden reference producer."""
    ort = _ort()
    so = session_options(threads, "disabled")
    try:
        return ort.InferenceSession(str(model_path), so, providers=[FALLBACK_PROVIDER])
    except Exception as exc:  # noqa: BLE001
        raise _classify_ort_error(exc, model_path) from None
