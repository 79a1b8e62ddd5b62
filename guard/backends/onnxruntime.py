"""The onnxruntime backend: fixed, recorded session options; the optimised model as payload.

Partitions come from ORT's own record of which execution provider each node of the
optimised graph was assigned to (``session.record_ep_graph_assignment_info``), grouped into
maximal connected same-provider subgraphs. Memory comes from one profiled inference at
build time: per-node output sizes from ORT's profiler, freed after their last consumer in
the executed order, give the liveness lower bound; the arena is the resident-memory growth
of that first inference (ORT allocates its arena lazily on the first run).
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

import numpy as np

from guard.backends.base import BuildInfo, BuildRequest, MemoryInfo, PartitionInfo
from guard.errors import ModelError, UnsupportedOpError

PAYLOAD = "model.opt.onnx"
META = "ort.json"
FALLBACK_PROVIDER = "CPUExecutionProvider"

# Lines the memory probe (guard.backends.ort_probe) writes into its stderr, around ORT's
# verbose log: the runs start, the runs are done, and (on failure) ORT's own error.
RUN_MARK = "=== guard-probe: run ==="
DONE_MARK = "=== guard-probe: done ==="
ERROR_MARK = "=== guard-probe: error ==="

_LEVELS = {
    "disabled": "ORT_DISABLE_ALL",
    "basic": "ORT_ENABLE_BASIC",
    "extended": "ORT_ENABLE_EXTENDED",
    "layout": "ORT_ENABLE_LAYOUT",
    "all": "ORT_ENABLE_ALL",
}


def _ort():
    import onnxruntime

    onnxruntime.set_default_logger_severity(3)  # errors only: keep the console readable
    return onnxruntime


def session_options(
    threads: int,
    level: str = "all",
    *,
    profile_dir: Path | None = None,
    optimized_path: Path | None = None,
):
    ort = _ort()
    if level not in _LEVELS:
        raise ModelError(
            f"options.onnxruntime.graph_optimization_level: unknown level {level!r}",
            hint=f"Use one of: {', '.join(_LEVELS)}.",
        )
    so = ort.SessionOptions()
    so.graph_optimization_level = getattr(ort.GraphOptimizationLevel, _LEVELS[level])
    so.intra_op_num_threads = threads
    so.inter_op_num_threads = 1
    so.execution_mode = ort.ExecutionMode.ORT_SEQUENTIAL
    # Spinning threads burn the other core between runs and disturb what we measure.
    so.add_session_config_entry("session.intra_op.allow_spinning", "0")
    so.add_session_config_entry("session.record_ep_graph_assignment_info", "1")
    so.log_severity_level = 3
    if optimized_path is not None:
        so.optimized_model_filepath = str(optimized_path)
    if profile_dir is not None:
        so.enable_profiling = True
        so.profile_file_prefix = str(profile_dir / "ort_profile")
    return so


def _ort_text(exc: BaseException) -> str:
    """The first line of an onnxruntime error, safe to print (it may carry model bytes)."""
    if isinstance(exc, UnicodeDecodeError):
        # pybind11 could not decode ORT's message (it quoted invalid UTF-8 from the model).
        raw = exc.object if isinstance(exc.object, bytes) else b""
        return (
            raw.decode("utf-8", "replace").strip().splitlines()[0][:300]
            if raw.strip()
            else "an error message that is not valid UTF-8"
        )
    text = str(exc).strip()
    return text.splitlines()[0][:500] if text else repr(exc)


def _classify_ort_error(exc: Exception, model: Path) -> Exception:
    text = _ort_text(exc)
    low = text.lower()
    if (
        "not_implemented" in low
        or "could not find an implementation" in low
        or "no opset import for domain" in low
        or "is not a registered function" in low
    ):
        return UnsupportedOpError(
            f"onnxruntime cannot run an operator: {text}",
            where=str(model),
            hint="Replace the operator or use a backend that supports it.",
        )
    return ModelError(f"onnxruntime rejected the model: {text}", where=str(model))


class OrtSession:
    """A loaded ORT artefact."""

    def __init__(self, artefact_dir: Path, threads: int):
        ort = _ort()
        meta = json.loads((artefact_dir / META).read_text())
        self._meta = meta
        # The payload is already optimised; keep the same level so that what runs is what
        # was recorded (re-applying passes to an optimised graph is idempotent).
        so = session_options(threads, meta["session_options"]["graph_optimization_level"])
        try:
            self._sess = ort.InferenceSession(
                str(artefact_dir / PAYLOAD), so, providers=meta["session_options"]["providers"]
            )
        except Exception as exc:  # noqa: BLE001 - ORT raises its own exception zoo
            raise _classify_ort_error(exc, artefact_dir / PAYLOAD) from None
        self.input_names = [i.name for i in self._sess.get_inputs()]
        self.output_names = [o.name for o in self._sess.get_outputs()]
        self._where = str(artefact_dir / PAYLOAD)

    def run(self, feeds: dict[str, np.ndarray]) -> list[np.ndarray]:
        try:
            return self._sess.run(None, feeds)
        except Exception as exc:  # noqa: BLE001 - ORT raises its own exception zoo
            # A model that loads but fails at run time (a Reshape to an impossible shape,
            # an index out of range) is the model's problem: exit 2, naming it.
            raise ModelError(
                f"onnxruntime failed running the model: {_ort_text(exc)}", where=self._where
            ) from None

    def partitions(self) -> PartitionInfo:
        return PartitionInfo.from_dict(self._meta["partitions"])

    def memory(self) -> MemoryInfo:
        return MemoryInfo.from_dict(self._meta["memory"])


def _partitions(sess, model: Any) -> dict[str, Any]:
    """Maximal connected same-provider subgraphs of the optimised graph."""
    assigned: dict[str, str] = {}
    for sg in sess.get_provider_graph_assignment_info():
        for n in sg.get_nodes():
            assigned[n.name] = sg.ep_name
    nodes = list(model.graph.node)
    producer: dict[str, int] = {}
    for i, n in enumerate(nodes):
        for o in n.output:
            producer[o] = i
    parent = list(range(len(nodes)))

    def find(x: int) -> int:
        while parent[x] != x:
            parent[x] = parent[parent[x]]
            x = parent[x]
        return x

    ep = [assigned.get(n.name, FALLBACK_PROVIDER) for n in nodes]
    for i, n in enumerate(nodes):
        for x in n.input:
            j = producer.get(x)
            if j is not None and ep[j] == ep[i]:
                parent[find(i)] = find(j)
    groups: dict[int, list[int]] = {}
    for i in range(len(nodes)):
        groups.setdefault(find(i), []).append(i)
    merged = _merge_acyclic(list(groups.values()), ep, nodes, producer)
    by_provider: dict[str, int] = {}
    for e in ep:
        by_provider[e] = by_provider.get(e, 0) + 1
    # The first provider in priority order is the delegate; the rest is fallback (with the
    # CPU wheel, CPU is the only provider and everything is "delegated" to it).
    delegate = sess.get_providers()[0]
    delegated = by_provider.get(delegate, 0)
    details = sorted(
        ({"provider": ep[g[0]], "nodes": len(g)} for g in merged), key=lambda d: -d["nodes"]
    )
    return {
        # Every partition counts, fallback ones included (as in the bundled compiler), so
        # `partitions: {max: 1}` cannot pass a graph that split across providers.
        "count": len(merged),
        "delegated_nodes": delegated,
        "fallback_nodes": len(nodes) - delegated,
        "by_provider": by_provider,
        "details": details,
        "how": "ORT's recorded node-to-provider assignment (session.record_ep_graph_assignment_info) "
        "over the optimised graph: connected same-provider subgraphs, merged per provider "
        "while the collapsed graph stays acyclic; count = partitions on every provider.",
    }


def _reachable(succ: dict[int, set[int]], start: int) -> set[int]:
    seen: set[int] = set()
    stack = list(succ[start])
    while stack:
        h = stack.pop()
        if h not in seen:
            seen.add(h)
            stack.extend(succ[h])
    return seen


def _merge_acyclic(
    groups: list[list[int]], ep: list[str], nodes: list[Any], producer: dict[str, int]
) -> list[list[int]]:
    """Merge same-provider groups when no path between them leaves the provider.

    Two disconnected CPU chains are one partition (nothing crosses a boundary between
    them); two CPU regions with a delegate region between them are two.
    """
    groups = [list(g) for g in groups]
    while True:
        owner = {n: gi for gi, g in enumerate(groups) for n in g}
        succ: dict[int, set[int]] = {gi: set() for gi in range(len(groups))}
        for i, n in enumerate(nodes):
            for x in n.input:
                j = producer.get(x)
                if j is not None and owner[j] != owner[i]:
                    succ[owner[j]].add(owner[i])
        reach = {g: _reachable(succ, g) for g in succ}
        pair = next(
            (
                (a, b)
                for a in range(len(groups))
                for b in range(a + 1, len(groups))
                if ep[groups[a][0]] == ep[groups[b][0]]
                and not any(b in reach[c] for c in reach[a] if c != b)
                and not any(a in reach[c] for c in reach[b] if c != a)
            ),
            None,
        )
        if pair is None:
            return groups
        a, b = pair
        groups[a] = sorted(groups[a] + groups[b])
        del groups[b]


def _parse_arena_log(log: str) -> dict[str, int | None]:
    """BFCArena growth during the probe's runs, from ORT's verbose log."""
    total_before = 0
    total_after: int | None = None
    largest_request = 0
    in_runs = False
    for line in log.splitlines():
        if RUN_MARK in line:
            in_runs = True
            continue
        if DONE_MARK in line:
            break
        m = re.search(r"BFCArena.*Total allocated bytes: (\d+)|Total allocated bytes: (\d+)", line)
        if m:
            value = int(m.group(1) or m.group(2))
            if in_runs:
                total_after = value
            else:
                total_before = value
            continue
        m = re.search(r"Extending BFCArena for Cpu.*num_bytes: (\d+)", line)
        if m and in_runs:
            largest_request = max(largest_request, int(m.group(1)))
    if total_after is None:
        return {"arena_bytes": 0 if in_runs else None, "largest_block_bytes": None}
    return {"arena_bytes": total_after - total_before, "largest_block_bytes": largest_request}


def _probe_feeds(
    model: Any, shapes: dict[str, tuple[int, ...]], inputs: dict[str, Any] | None
) -> dict[str, np.ndarray]:
    """The probe's feeds: the suite's bound inputs, else zeros of each input's shape."""
    from onnx.helper import tensor_dtype_to_np_dtype

    init = {i.name for i in model.graph.initializer}
    feeds = {}
    for inp in model.graph.input:
        if inp.name in init:
            continue
        if inputs is not None and inp.name in inputs:
            feeds[inp.name] = np.asarray(inputs[inp.name])
        else:
            dtype = tensor_dtype_to_np_dtype(inp.type.tensor_type.elem_type)
            feeds[inp.name] = np.zeros(shapes[inp.name], dtype=dtype)
    return feeds


def _probe_error(stderr: str) -> str:
    """onnxruntime's own message from a failed probe (not the last verbose log line)."""
    lines = [ln.strip() for ln in stderr.splitlines() if ln.strip()]
    for ln in reversed(lines):
        if ERROR_MARK in ln:
            return ln.split(ERROR_MARK, 1)[1].strip()
    # A probe that died before reporting (a native crash): its last words, whatever they are.
    return lines[-1] if lines else "no output"


def _memory(
    model_path: Path,
    model: Any,
    threads: int,
    level: str,
    shapes: dict[str, tuple[int, ...]],
    providers: list[str],
    work_dir: Path | None = None,
    inputs: dict[str, Any] | None = None,
) -> dict:
    """Probe one model's memory in a child process: liveness lower bound and arena growth.

    The probe runs the model on ``inputs`` (the suite's bound values). Its scratch files
    live in ``work_dir`` (the artefact's temporary build directory), so a killed build
    leaves them where the next build cleans up, not in /tmp.
    """
    with tempfile.TemporaryDirectory(prefix="guard-ort-probe-", dir=work_dir) as tmp:
        spec = Path(tmp) / "spec.json"
        feeds_path = Path(tmp) / "inputs.npz"
        np.savez(feeds_path, **_probe_feeds(model, shapes, inputs))
        spec.write_text(
            json.dumps(
                {
                    "model": str(model_path),
                    "threads": threads,
                    "level": level,
                    "providers": providers,
                    "work_dir": tmp,
                    "inputs": str(feeds_path),
                }
            )
        )
        proc = subprocess.run(
            [sys.executable, "-m", "guard.backends.ort_probe", str(spec)],
            capture_output=True,
            text=True,
            timeout=600,
        )
    if proc.returncode != 0:
        raise ModelError(
            f"onnxruntime memory probe failed: {_probe_error(proc.stderr)}",
            where=str(model_path),
            hint="The model could not run on the suite's inputs: check their "
            "values (e.g. inputs: {sr: {shape: [], dist: const, value: "
            "16000}}).",
        )
    order = json.loads(proc.stdout.strip().splitlines()[-1])["order"]
    arena = _parse_arena_log(proc.stderr)
    by_name = {n.name: n for n in model.graph.node}
    graph_outputs = {o.name for o in model.graph.output}
    step_of = {name: i for i, (name, _) in enumerate(order)}
    last_use: dict[str, int] = {}
    for name, _ in order:
        n = by_name.get(name)
        if n is None:
            continue
        for x in n.input:
            last_use[x] = step_of[name]
    live = peak = naive = 0
    frees: dict[int, int] = {}
    for i, (name, size) in enumerate(order):
        n = by_name.get(name)
        live += size
        naive += size
        peak = max(peak, live)
        if n is not None and not (set(n.output) & graph_outputs):
            end = max((last_use.get(o, i) for o in n.output), default=i)
            frees[end] = frees.get(end, 0) + size
        live -= frees.pop(i, 0)
    return {
        "arena_bytes": arena["arena_bytes"],
        "lower_bound_bytes": peak,
        "how": "arena: bytes ORT's CPU BFCArena reserved across three inferences of a fresh "
        "session (its verbose log's 'Total allocated bytes', after minus before the "
        "first run; includes the memory-pattern block and allocator rounding); lower "
        "bound: max over ORT's executed node order of live output bytes (sizes from "
        "ORT's profiler, each freed after its last consumer)",
        "extra": {
            "naive_bytes": naive,
            "profiled_nodes": len(order),
            "largest_block_bytes": arena["largest_block_bytes"],
        },
    }


class OnnxRuntimeBackend:
    name = "onnxruntime"

    def versions(self) -> tuple[dict[str, Any], dict[str, Any]]:
        ort = _ort()
        v = {"name": "onnxruntime", "version": ort.__version__}
        return dict(v), dict(v)

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
        import onnx

        # The optimised graph, read once: its edges give partitions and liveness.
        optimised = onnx.load(str(payload), load_external_data=False)
        partitions = _partitions(sess, optimised)
        memory = _memory(
            payload,
            optimised,
            req.threads,
            level,
            req.input_shapes,
            providers,
            work_dir=req.out_dir,
            inputs=req.inputs,
        )
        session_opts = {
            "graph_optimization_level": level,
            "intra_op_num_threads": req.threads,
            "inter_op_num_threads": 1,
            "execution_mode": "sequential",
            "allow_spinning": False,
            "providers": sess.get_providers(),
        }
        meta = {
            "schema_version": 1,
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


def reference_session(model_path: Path, threads: int = 1):
    """An ORT session with every graph optimisation off: the golden reference producer."""
    ort = _ort()
    so = session_options(threads, "disabled")
    try:
        return ort.InferenceSession(str(model_path), so, providers=[FALLBACK_PROVIDER])
    except Exception as exc:  # noqa: BLE001
        raise _classify_ort_error(exc, model_path) from None
