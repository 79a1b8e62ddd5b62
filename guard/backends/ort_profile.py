"""Per-node time of an onnxruntime artefact, from onnxruntime's own profiler.

A second session of the artefact's payload with the same recorded options plus
``enable_profiling`` runs the model ``runs + 1`` times; the profiler's JSON (Chrome trace
format: one ``cat: "Node"`` event named ``<node>_kernel_time`` per node and run, ``dur``
in microseconds, ``args.op_name`` and ``args.provider``) is read back, the first run
(warm-up: allocations, first-touch) dropped, and each node's mean time per inference and
share of all node time reported, largest first. The profiled session is not the measured
one: profiling costs time per node, so it never touches the latency numbers.
"""

from __future__ import annotations

import json
import tempfile
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from guard.backends.base import KernelRow
from guard.backends.ort_session import _ort, session_options
from guard.core.json_types import Json

KERNEL_SUFFIX = "_kernel_time"


@dataclass
class NodeTime:
    """One node's profiled time: its op and the provider that ran it, as the profiler
    names them, and one time per run, in microseconds."""

    op: str | None
    provider: str | None
    us: list[float] = field(default_factory=list)


def node_times(events: list[Any], skip_runs: int = 1) -> dict[str, NodeTime]:
    """Each node's times from a profile's events (runs in order; the first ``skip_runs``
    dropped where later runs remain)."""
    per: dict[str, NodeTime] = {}
    for e in events:
        if not isinstance(e, Mapping) or e.get("cat") != "Node":
            continue
        name = str(e.get("name", ""))
        if not name.endswith(KERNEL_SUFFIX):
            continue
        node = name[: -len(KERNEL_SUFFIX)]
        raw = e.get("args")
        args: Mapping[str, Json] = raw if isinstance(raw, Mapping) else {}  # the profiler's
        row = per.setdefault(node, NodeTime(args.get("op_name"), args.get("provider")))
        row.us.append(float(e.get("dur", 0)))
    for row in per.values():
        row.us = row.us[skip_runs:] or row.us
    return per


def top_nodes(
    per: Mapping[str, NodeTime], top: int, source: str = "onnxruntime profiler"
) -> list[KernelRow]:
    """The ``top`` nodes by mean time per inference, as result ``kernels`` rows (``per``:
    each node's times, one per inference; ``source`` names the profiler)."""
    means = {n: float(np.mean(r.us)) / 1e3 for n, r in per.items() if r.us}
    total = sum(means.values())
    ranked = sorted(means.items(), key=lambda kv: -round(kv[1], 6))[:top]  # as rows show ms
    return [
        {
            "kernel": n,
            "op": per[n].op,
            "provider": per[n].provider,
            "ms": round(ms, 6),
            "share": round(ms / total, 4) if total > 0 else None,
            "nodes": [n],
            "source": source,
        }
        for n, ms in ranked
    ]


def profile_nodes(
    payload: Path,
    level: str,
    providers: list[str],
    threads: int,
    feeds: dict[str, np.ndarray],
    *,
    runs: int = 5,
    top: int = 10,
) -> list[KernelRow]:
    """The top nodes of ``payload`` by time, from ``runs`` profiled inferences."""
    ort = _ort()
    with tempfile.TemporaryDirectory(prefix="guard-ort-profile-") as tmp:
        so = session_options(threads, level, profile_dir=Path(tmp))
        sess = ort.InferenceSession(str(payload), so, providers=providers)
        for _ in range(runs + 1):
            sess.run(None, feeds)
        path = Path(sess.end_profiling())
        events = json.loads(path.read_text())
    return top_nodes(node_times(events), top)
