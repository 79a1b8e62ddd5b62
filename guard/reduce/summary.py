"""What a reduction says: one line per outcome, the summary document, the README."""

from __future__ import annotations

from collections import Counter
from pathlib import Path
from typing import Any, NotRequired, TypedDict

import numpy as np
import onnx

from guard.checks.evaluate import tolerance_bounds
from guard.reduce.oracle import Observation, ObservationDetail
from guard.reduce.subgraph import ModelGraph
from guard.suite import ModelEntry


class KeptNode(TypedDict):
    node: str
    op: str


class TensorInfo(TypedDict):
    shape: list[int]
    dtype: str


class Observed(TypedDict):
    detail: ObservationDetail
    described: str


class SuiteChecks(TypedDict, total=False):
    """The reproducer suite's ``checks:``: the block the reduction was judged by."""

    tolerance: dict[str, object]
    partitions: dict[str, int]


class ReduceSummary(TypedDict):
    """What a reduction says (reduce.json, and what ``guard reduce`` returns)."""

    kind: str
    model: str
    backend: str
    mode: str
    source: str
    latency_base: str | None
    nodes_before: int
    compute_nodes_before: int
    nodes_after: int
    ops_before: dict[str, int]
    ops_after: dict[str, int]
    kept: list[KeptNode]
    inputs: dict[str, TensorInfo]
    outputs: list[str]
    full: Observed
    reduced: Observed
    tests: int
    cuts_built: int
    one_minimal: bool
    seconds: float
    suite_checks: SuiteChecks
    base_backend: NotRequired[str | None]
    bundle: NotRequired[str]


def describe(mode: str, d: ObservationDetail) -> str:
    if mode == "accuracy":
        if d.get("max_abs_err") is None:
            return "outputs not compared"
        return (
            f"max abs err {d['max_abs_err']:.3g}, max rel err {d['max_rel_err']:.3g} "
            f"against rtol={d.get('rtol')} atol={d.get('atol')}"
        )
    if mode == "partitions":
        c = d.get("culprits") or []
        names = ", ".join(f"{x['op']} node {x['node']!r}" for x in c[:3])
        return f"{d.get('partitions')} partition(s) > max {d.get('max')}" + (
            f", split at {names}" if names else ""
        )
    if d.get("ratio") is None:
        return "not measured"
    return (
        f"head/base {d['ratio']:.3f}x (CI {d['ci'][0]:.3f}-{d['ci'][1]:.3f}), "
        f"{d.get('verdict')} at {d.get('threshold_pct')}%"
    )


def _ops(model: onnx.ModelProto, idx: list[int] | None = None) -> dict[str, int]:
    nodes = model.graph.node
    c = (
        Counter(nodes[i].op_type for i in idx)
        if idx is not None
        else Counter(n.op_type for n in nodes)
    )
    return dict(sorted(c.items()))


def summary(
    entry: ModelEntry,
    bname: str,
    mode: str,
    full: onnx.ModelProto,
    mg: ModelGraph,
    red: Any,
    whole: Observation,
    final_obs: Observation,
    final: Any,
    seconds: float,
    path: Path,
    latency_base: Path | str | None,
    cuts: int,
) -> ReduceSummary:
    checks: SuiteChecks = {}
    if mode == "accuracy":
        tolerance = entry.checks.tolerance
        checks["tolerance"] = tolerance.to_dict() if tolerance is not None else {}
        if not checks["tolerance"]:
            checks["tolerance"] = dict(tolerance_bounds(None))
    elif mode == "partitions":
        partitions = entry.checks.partitions
        checks["partitions"] = {"max": int(partitions.max if partitions is not None else 1)}
    g = full.graph
    return {
        "kind": "guard-reduce",
        "model": entry.name,
        "backend": bname,
        "mode": mode,
        "source": str(path),
        "latency_base": str(latency_base) if latency_base else None,
        "nodes_before": len(g.node),
        "compute_nodes_before": len(mg.compute),
        "nodes_after": len(final.nodes),
        "ops_before": _ops(full),
        "ops_after": _ops(full, final.nodes),
        "kept": [{"node": g.node[i].name, "op": g.node[i].op_type} for i in final.nodes],
        "inputs": {
            k: {"shape": list(np.asarray(v).shape), "dtype": str(np.asarray(v).dtype)}
            for k, v in final.feeds.items()
        },
        "outputs": [o.name for o in final.model.graph.output],
        "full": {"detail": whole.detail, "described": describe(mode, whole.detail)},
        "reduced": {"detail": final_obs.detail, "described": describe(mode, final_obs.detail)},
        "tests": red.tests,
        "cuts_built": cuts,
        "one_minimal": red.minimal,
        "seconds": round(seconds, 2),
        "suite_checks": checks,
    }


def readme(s: ReduceSummary) -> str:
    kept = "\n".join(f"- `{k['node'] or '(unnamed)'}` ({k['op']})" for k in s["kept"])
    ins = "\n".join(f"- `{k}`: {v['dtype']} {v['shape']}" for k, v in s["inputs"].items())
    if s["mode"] == "latency" and s.get("base_backend") not in (None, s["backend"]):
        repro = (
            "```\nguard run base.yaml --no-track --json base.json   # "
            f"{s['base_backend']}\nguard run suite.yaml --no-track --json head.json  # "
            f"{s['backend']}\n```\n\nexpected: head's p50 over base's above the threshold. "
            "Two processes are noisier than the interleaved ratio above (measured in one "
            "process, pairs alternating); on a shared machine run each twice."
        )
    elif s["mode"] == "latency":
        repro = (
            "```\nguard ab suite.yaml --base base.yaml\n```\n\nexpected: the row is "
            "`regressed` (head/base ratio above the threshold)."
        )
    elif s["mode"] == "accuracy":
        repro = (
            "```\nguard run suite.yaml --no-track\n```\n\nexpected: exit 1, the "
            "`tolerance` check fails against the golden in goldens/ (the reference's "
            "outputs on this graph, fed with inputs.npz)."
        )
    else:
        repro = (
            "```\nguard run suite.yaml --no-track\n```\n\nexpected: exit 1, the "
            "`partitions` check fails; `guard partition model.onnx` shows the split."
        )
    minimal = (
        "1-minimal: removing any one node makes the problem go away"
        if s["one_minimal"]
        else f"stopped after {s['tests']} tests (not 1-minimal)"
    )
    pair = s.get("base_backend") not in (None, s["backend"])
    against = f" against {s['base_backend']}" if pair else ""
    return f"""# guard reduce: {s["model"]} [{s["backend"]}{against}], {s["mode"]}

{s["nodes_before"]} nodes ({s["compute_nodes_before"]} compute) reduced to **{s["nodes_after"]}**
in {s["tests"]} tests, {s["seconds"]} s; {minimal}.

- full model: {s["full"]["described"]}
- reduced: {s["reduced"]["described"]}

## Kept nodes

{kept}

Inputs (the full model's intermediate tensors at the cut, in inputs.npz and the golden):

{ins}

Outputs: {", ".join(f"`{o}`" for o in s["outputs"])}

## Reproduce

{repro}

Source model: `{s["source"]}`; ops before: {s["ops_before"]}; ops kept: {s["ops_after"]}.
"""
