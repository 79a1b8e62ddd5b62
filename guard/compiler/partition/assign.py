"""Partitioning: which backend runs which nodes, and what the splits cost.

Each backend is a support predicate and its boundary costs (guard.compiler.partition.support:
``decline(node, graph)`` returns ``None`` or a reason, e.g. "op LRN is not in profile
gpu-lite"). Backends are asked in priority order; the last one is the fallback (``cpu``,
the reference interpreter), which runs every op the importer produces (control flow never
gets If/Loop as host nodes whose branches are compiled as graphs of their own: see
guard.compiler.partition.plan), so no node is left without a backend.

Algorithm (:func:`partition`):
1. Each node goes to the first backend that does not decline it; every decline is kept.
2. Nodes are visited in topological order; a node joins the partitions of its
   predecessors on the same backend unless the merge would make the collapsed graph
   cyclic (a path from one side to the other through a third partition). The collapsed
   graph of partitions therefore stays a DAG, and every partition is convex. A node with
   no edges at all (dead code) joins the largest partition of its backend: it costs no
   boundary, so it should not count as a partition.
3. A delegate partition smaller than its backend's ``min_partition_size`` goes back to the
   next backend (delegating two isolated nodes costs more in boundary copies than it
   saves); steps 2-3 repeat until nothing moves.
4. The report: partitions in execution order, nodes per partition, boundary tensors with
   bytes crossing, the fallback tax (bytes crossing at the profile's bandwidth plus one
   sync per partition-to-partition edge), and for every split the node that caused it and
   why each backend declined it.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from types import MappingProxyType

from guard.compiler.frontend.specialise import Specialised
from guard.compiler.graph.exec_order import topological_order
from guard.compiler.graph.grouping import Groups, absorb_isolated, group_connected
from guard.compiler.graph.view import GraphView
from guard.compiler.ir.layout import count_conversions
from guard.compiler.partition.report_json import (
    PartitionReport,
    PartitionRow,
    QuantConversions,
    Split,
)
from guard.compiler.partition.support import PartitionTarget

# -- the partitioner ----------------------------------------------------------------------


@dataclass(frozen=True)
class Partition:
    id: int  # position in execution order
    backend: str
    delegated: bool
    nodes: tuple[int, ...]  # node indices, in the view's order


@dataclass(frozen=True)
class Boundary:
    tensor: str
    nbytes: int
    src: int  # partition ids
    dst: int


@dataclass(frozen=True)
class PartitionPlan:
    backends: tuple[str, ...]
    partitions: tuple[Partition, ...]
    group_of: tuple[int, ...]  # node index -> partition id
    boundaries: tuple[Boundary, ...]
    declines: Mapping[str, Mapping[str, str]] = field(
        default_factory=dict
    )  # node -> backend -> why
    cycle_splits: Mapping[str, str] = field(default_factory=dict)  # node -> why it started anew
    tax_ms: float = 0.0
    tax_how: str = ""

    @property
    def delegated(self) -> tuple[Partition, ...]:
        return tuple(p for p in self.partitions if p.delegated)


def _group(g: GraphView, assign: Sequence[str]) -> tuple[Groups, dict[tuple[int, int], str]]:
    groups, refused = group_connected(g.preds, assign)
    cycle_splits = {
        (i, p): f"joining the {assign[i]} partition of {g.nodes[p].name!r} would make the "
        "partition graph cyclic (a path leaves it and comes back)"
        for i, p in refused
    }
    absorb_isolated(groups, g.preds, g.succs, assign)
    return groups, cycle_splits


def partition(g: GraphView, backends: Sequence[PartitionTarget]) -> PartitionPlan:
    """Partition ``g`` over ``backends`` (priority order; the last must be a fallback)."""
    if not backends or not backends[-1].fallback:
        raise ValueError("the last backend must be a fallback that runs anything")
    by_name = {b.name: b for b in backends}
    declines: dict[str, dict[str, str]] = {}
    candidates: list[list[str]] = []
    for n in g.nodes:
        ok = []
        for b in backends:
            why = b.support.decline(n, g)
            if why is None:
                ok.append(b.name)
            else:
                declines.setdefault(n.name, {})[b.name] = why
        candidates.append(ok)
    assign = [c[0] for c in candidates]
    for _round in range(len(g.nodes) + 2):
        groups, cycle_splits = _group(g, assign)
        moved = False
        for members in groups.members.values():
            b = by_name[assign[members[0]]]
            if b.fallback or len(members) >= b.min_partition_size:
                continue
            for i in members:
                name = g.nodes[i].name
                declines.setdefault(name, {})[b.name] = (
                    f"its partition of {len(members)} node(s) is below min_partition_size "
                    f"{b.min_partition_size}"
                )
                candidates[i].remove(b.name)
                assign[i] = candidates[i][0]
            moved = True
        if not moved:
            break
    # Partition ids in execution order (the earliest-first partition-contiguous order).
    raw_of = [groups.of[i] for i in range(len(g.nodes))]
    order = topological_order(g, raw_of)
    ids: dict[int, int] = {}
    for i in order:
        ids.setdefault(raw_of[i], len(ids))
    group_of = tuple(ids[r] for r in raw_of)
    parts = []
    for raw, pid in sorted(ids.items(), key=lambda kv: kv[1]):
        nodes = tuple(sorted(groups.members[raw]))
        b = by_name[assign[nodes[0]]]
        parts.append(Partition(pid, b.name, not b.fallback, nodes))
    boundaries = []
    for v, cons in g.consumers.items():
        p = g.producer.get(v)
        if p is None:
            continue
        for dst in sorted({group_of[c] for c in cons} - {group_of[p]}):
            boundaries.append(Boundary(v, g.tensors[v].nbytes, group_of[p], dst))
    tax_ms, how = _tax(parts, boundaries, by_name)
    return PartitionPlan(
        backends=tuple(b.name for b in backends),
        partitions=tuple(parts),
        group_of=group_of,
        boundaries=tuple(boundaries),
        declines=MappingProxyType({k: MappingProxyType(v) for k, v in declines.items()}),
        cycle_splits=MappingProxyType(
            {
                g.nodes[i].name: why
                for (i, p), why in cycle_splits.items()
                if group_of[i] != group_of[p]
            }
        ),
        tax_ms=tax_ms,
        tax_how=how,
    )


def _tax(
    parts: Sequence[Partition],
    boundaries: Sequence[Boundary],
    by_name: dict[str, PartitionTarget],
) -> tuple[float, str]:
    """Boundary copies at the delegate's bandwidth plus one sync per partition edge."""
    edges: dict[tuple[int, int], int] = {}
    for b in boundaries:
        edges[(b.src, b.dst)] = edges.get((b.src, b.dst), 0) + b.nbytes
    total, lines = 0.0, []
    for (src, dst), nbytes in sorted(edges.items()):
        # The delegate side sets the link; between two fallbacks, the fallback's.
        side = next((parts[x] for x in (src, dst) if parts[x].delegated), parts[src])
        be = by_name[side.backend]
        ms = nbytes / (be.bandwidth_gb_s * 1e9) * 1e3 + be.sync_us / 1e3
        total += ms
        lines.append(f"{src}->{dst}: {nbytes} B at {be.bandwidth_gb_s} GB/s + {be.sync_us} us sync")
    how = "; ".join(lines) if lines else "no boundaries"
    return total, how


# -- the report ---------------------------------------------------------------------------


def report_dict(plan: PartitionPlan, g: GraphView) -> PartitionReport:
    """The partition report as JSON-ready data (the artefact's partitions.json)."""
    node_count: dict[str, int] = {}
    for p in plan.partitions:
        node_count[p.backend] = node_count.get(p.backend, 0) + len(p.nodes)
    primary = plan.backends[0]
    splits: list[Split] = []
    for p in plan.partitions:
        for i in p.nodes:
            n = g.nodes[i]
            # A refused merge is a cause only where it started this partition: no
            # predecessor of the node is in it (otherwise an earlier split is the cause).
            started = n.name in plan.cycle_splits and all(
                plan.group_of[q] != p.id for q in g.preds[i]
            )
            if p.backend != primary or started:
                why = dict(plan.declines.get(n.name, {}))
                if started:
                    why[p.backend] = plan.cycle_splits[n.name]
                splits.append(
                    {
                        "node": n.name,
                        "op": n.op,
                        "partition": p.id,
                        "backend": p.backend,
                        "declined": why,
                    }
                )
    parts: list[PartitionRow] = []
    for p in plan.partitions:
        ops: dict[str, int] = {}
        for i in p.nodes:
            ops[g.nodes[i].op] = ops.get(g.nodes[i].op, 0) + 1
        parts.append(
            {
                "id": p.id,
                "backend": p.backend,
                "delegated": p.delegated,
                "nodes": len(p.nodes),
                "first": g.nodes[p.nodes[0]].name,
                "last": g.nodes[p.nodes[-1]].name,
                "ops": dict(sorted(ops.items())),
            }
        )
    delegated = sum(len(p.nodes) for p in plan.delegated)
    return {
        "schema_version": 1,
        "backends": list(plan.backends),
        # Every partition in execution order, fallback segments included: a graph wholly on
        # the fallback is 1 partition (0 delegated), so a `partitions: {max: 1}` check
        # cannot pass a model that never reached the delegate.
        "count": len(plan.partitions),
        "delegated_partitions": len(plan.delegated),
        "fallback_partitions": len(plan.partitions) - len(plan.delegated),
        "delegated_nodes": delegated,
        "fallback_nodes": len(g.nodes) - delegated,
        "by_backend": node_count,
        "partitions": parts,
        "boundaries": [
            {"tensor": b.tensor, "bytes": b.nbytes, "from": b.src, "to": b.dst}
            for b in plan.boundaries
        ],
        "boundary_bytes": sum(b.nbytes for b in plan.boundaries),
        "fallback_tax_ms": round(plan.tax_ms, 6),
        "fallback_tax_how": plan.tax_how,
        "splits": splits,
        # Relayouts and NCHW<->NHWC transposes left in the final graph (guard.compiler.ir.layout)
        "layout_conversions": count_conversions((n.op, n.attrs) for n in g.nodes),
        # Quantize/dequantize steps left between int8 and float ops: each one a pass over
        # the tensor, like a relayout (the weights' are constants, folded at compile time).
        "quant_conversions": count_quant_conversions(g),
    }


def count_quant_conversions(g: GraphView) -> QuantConversions:
    """QuantizeLinear/DequantizeLinear on activations in the final graph (nodes, and the
    steps lower_qdq made of them inside fused elementwise programs), and how many of the
    nodes are a Q whose result only a DQ reads (a pair that round-trips through int8)."""
    readers: dict[str, list[str]] = {}
    for n in g.nodes:
        for i in n.args:
            readers.setdefault(i, []).append(n.op)
    quant = [
        n for n in g.nodes
        if n.op in ("QuantizeLinear", "DequantizeLinear") and g.tensors[n.args[0]].kind != "const"
    ]  # fmt: skip
    lowered = sum(1 for n in g.nodes if n.attrs.get("qdq"))
    for n in g.nodes:
        program = n.attrs.get("program")
        if isinstance(program, list):
            lowered += sum(1 for st in program if st.get("attrs", {}).get("qdq"))
    pairs = sum(
        1
        for n in quant
        if n.op == "QuantizeLinear"
        and readers.get(n.outputs[0])
        and set(readers[n.outputs[0]]) == {"DequantizeLinear"}
    )
    return {"nodes": len(quant) + lowered, "pairs": pairs, "fused": lowered}


def _mib(n: int) -> str:
    return f"{n / 2**20:.2f} MiB" if n >= 2**20 else f"{n / 1024:.1f} KiB"


def format_report(rep: PartitionReport, title: str = "", max_splits: int = 20) -> str:
    """Human-readable partition report: what to look at when the count changes."""
    lines = [f"partition report{': ' + title if title else ''}"]
    lines.append(
        f"  backends (priority order): {' > '.join(rep['backends'])}; "
        f"{rep['count']} partition(s): {rep['delegated_partitions']} delegated, "
        f"{rep['fallback_partitions']} fallback; "
        f"nodes {rep['delegated_nodes']} delegated, {rep['fallback_nodes']} fallback"
    )
    lines.append(f"  {'#':>3}  {'backend':<12} {'nodes':>5}  first .. last")
    for p in rep["partitions"]:
        lines.append(
            f"  {p['id']:>3}  {p['backend']:<12} {p['nodes']:>5}  {p['first']} .. {p['last']}"
        )
    lines.append(
        f"  boundaries: {len(rep['boundaries'])} tensor(s), {_mib(rep['boundary_bytes'])} crossing"
    )
    for b in rep["boundaries"][:max_splits]:
        lines.append(f"    {b['tensor']}: {b['from']} -> {b['to']}, {_mib(b['bytes'])}")
    lines.append(f"  fallback tax: {rep['fallback_tax_ms']:.3f} ms ({rep['fallback_tax_how']})")
    if rep.get("layout_conversions") is not None:
        lines.append(
            f"  layout conversions: {rep['layout_conversions']} (relayouts and NCHW<->NHWC "
            "transposes in the final graph)"
        )
    qc = rep.get("quant_conversions")
    if qc and qc["nodes"]:
        lines.append(
            f"  quant conversions: {qc['nodes']} QuantizeLinear/DequantizeLinear on activations "
            f"({qc.get('fused', 0)} of them steps of fused elementwise kernels), {qc['pairs']} "
            "Q->DQ pair(s) (each a pass over its tensor, like a relayout)"
        )
    for cf in rep.get("control_flow", []):
        subs = ", ".join(
            f"{attr}: {r['count']} partition(s) ({r['delegated_partitions']} delegated, "
            f"{r['fallback_nodes']} fallback node(s))"
            for attr, r in cf["subgraphs"].items()
        )
        lines.append(
            f"  control flow: {cf['node']} ({cf['op']}) runs on the host in partition "
            f"{cf['partition']} and calls {subs}"
        )
        spec = cf.get("specialised")
        if spec:
            lines.append(f"    specialised: {_specialised(spec)}")
    if rep["splits"]:
        lines.append("  splits (node that left the first backend, and why):")
        for s in rep["splits"][:max_splits]:
            why = "; ".join(f"{b}: {r}" for b, r in s["declined"].items())
            lines.append(
                f"    {s['node']} ({s['op']}) -> partition {s['partition']} on {s['backend']}: {why}"
            )
        if len(rep["splits"]) > max_splits:
            ops: dict[str, int] = {}
            for s in rep["splits"][max_splits:]:
                ops[s["op"]] = ops.get(s["op"], 0) + 1
            more = ", ".join(f"{o} x{c}" for o, c in sorted(ops.items()))
            lines.append(f"    ... and {len(rep['splits']) - max_splits} more ({more})")
    return "\n".join(lines)


def _specialised(spec: Specialised) -> str:
    """One line for a specialised If (guard.compiler.frontend.specialise)."""
    branches = ", ".join(f"{a} {how}" for a, how in spec["branches"].items())
    return (
        f"the model compiled once per branch, the host dispatching on {spec['guard']} "
        f"({spec['why']}): {branches}"
    )
