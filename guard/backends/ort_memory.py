"""The onnxruntime backend's memory facts: one profiled inference in a child process.

Per-node output sizes from ORT's profiler, freed after their last consumer in the
executed order, give the liveness lower bound; the arena is what ORT's CPU BFCArena
reserved across the probe's inferences, read from its verbose log (ORT allocates its arena
lazily on the first run). The child is guard.backends.ort_probe.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
import tempfile
from collections.abc import Mapping
from pathlib import Path

import numpy as np
import onnx
from onnx.helper import tensor_dtype_to_np_dtype

from guard.core.errors import ModelError

# Lines the memory probe (guard.backends.ort_probe) writes into its stderr, around ORT's
# verbose log: the runs start, the runs are done, and (on failure) ORT's own error.
RUN_MARK = "=== guard-probe: run ==="


DONE_MARK = "=== guard-probe: done ==="


ERROR_MARK = "=== guard-probe: error ==="


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
    model: onnx.ModelProto,
    shapes: dict[str, tuple[int, ...]],
    inputs: Mapping[str, np.ndarray] | None,
) -> dict[str, np.ndarray]:
    """The probe's feeds: the suite's bound inputs, else zeros of each input's shape."""
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


def probe_memory(
    model_path: Path,
    model: onnx.ModelProto,
    threads: int,
    level: str,
    shapes: dict[str, tuple[int, ...]],
    providers: list[str],
    work_dir: Path | None = None,
    inputs: Mapping[str, np.ndarray] | None = None,
) -> dict:
    """Probe one model's memory in a child process: liveness lower bound and arena growth.

    The probe runs the model on ``inputs`` (the suite's bound values). Its scratch files
    live in ``work_dir`` (the artefact's temporary build directory), so a killed build
    leaves them where the next build cleans up, not in /tmp.
    """
    with tempfile.TemporaryDirectory(prefix="guard-ort-probe-", dir=work_dir) as tmp:
        spec = Path(tmp) / "spec.json"
        feeds_path = Path(tmp) / "inputs.npz"
        # numpy's stub checks **arrays against savez's allow_pickle: bool keyword.
        np.savez(feeds_path, **_probe_feeds(model, shapes, inputs))  # type: ignore[arg-type]
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
