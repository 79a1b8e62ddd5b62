"""The kernel plan: what the code generator emits, read only from frozen plans.

Built from the graph view, the MemoryPlan (arena offsets, elided nodes), the partition
plan (which nodes are native, in which partition) and the weights layout (constant
offsets); nothing here re-derives an offset or a view. Each :class:`Step` is one node of
a native partition with its operands as (space, byte offset, shape, dtype): ``arena``
(the memory plan's slot), ``weights`` (the weights blob) or ``packed`` (a constant the
kernel wants in another order, e.g. convolution weights blocked by output channel,
packed here at build time and stored in the artefact). Elided nodes emit nothing.

Kernels are deduplicated: steps with one :attr:`Step.key` (op, attributes, operand
shapes, dtypes, which operands are constants, whether the output may alias an input)
share one generated function, called with different pointers.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np

from guard.compiler.graph.exec_order import ALIGNMENT, GraphView, align

SCHEMA_VERSION = 1


@dataclass(frozen=True)
class Operand:
    name: str
    space: str  # "arena" | "weights" | "packed"
    offset: int  # bytes from the start of its space
    shape: tuple[int, ...]
    dtype: str

    @property
    def nbytes(self) -> int:
        return int(np.prod(self.shape, dtype=np.int64)) * np.dtype(self.dtype).itemsize

    def to_list(self) -> list[Any]:
        return [self.name, self.space, self.offset, list(self.shape), self.dtype]

    @classmethod
    def from_list(cls, r: list[Any]) -> Operand:
        return cls(r[0], r[1], int(r[2]), tuple(r[3]), r[4])


@dataclass(frozen=True)
class Step:
    node: str
    op: str
    kernel: str  # the generated function's symbol
    inputs: tuple[Operand | None, ...]
    outputs: tuple[Operand, ...]
    attrs: Mapping[str, Any]
    may_alias: bool  # an output shares bytes with an input (in place)
    # The tasks the thread pool runs instead of one call (guard.compiler.codegen.split):
    # each a step for one slice of the output; ``kernel`` is then the task function.
    parts: tuple[Step, ...] = ()

    @property
    def key(self) -> str:
        return kernel_key(self.op, self.attrs, self.inputs, self.outputs, self.may_alias)


def _jsonable(v: Any) -> Any:
    if isinstance(v, np.ndarray):
        return {"array": v.tolist(), "dtype": v.dtype.name}
    if isinstance(v, (np.integer, np.floating)):
        return v.item()
    if isinstance(v, tuple):
        return list(v)
    return v


def kernel_key(
    op: str, attrs: Mapping[str, Any], inputs: Any, outputs: Any, may_alias: bool
) -> str:
    sig = {
        "op": op,
        "attrs": {k: _jsonable(v) for k, v in sorted(attrs.items()) if k != "view"},
        "in": [None if o is None else [list(o.shape), o.dtype, o.space] for o in inputs],
        "out": [[list(o.shape), o.dtype] for o in outputs],
        "alias": may_alias,
    }
    return json.dumps(sig, sort_keys=True, default=str)


@dataclass(frozen=True)
class PartitionKernels:
    partition: int
    entry: str  # symbol of the partition's entry function
    steps: tuple[Step, ...]


@dataclass(frozen=True)
class KernelPlan:
    """Frozen: what to emit, in order, per native partition."""

    partitions: tuple[PartitionKernels, ...]
    packed_bytes: int
    inputs: tuple[Operand, ...]  # graph inputs' arena slots
    outputs: tuple[Operand, ...]  # graph outputs (arena or weights)
    main: str | None  # the one-call entry, when every partition is native

    def steps(self) -> list[Step]:
        return [s for p in self.partitions for s in p.steps]

    def to_dict(self) -> dict[str, Any]:
        return {
            "schema_version": SCHEMA_VERSION,
            "packed_bytes": self.packed_bytes,
            "main": self.main,
            "inputs": [o.to_list() for o in self.inputs],
            "outputs": [o.to_list() for o in self.outputs],
            "partitions": [
                {
                    "partition": p.partition,
                    "entry": p.entry,
                    "steps": [
                        {
                            "node": s.node,
                            "op": s.op,
                            "kernel": s.kernel,
                            "inputs": [None if o is None else o.to_list() for o in s.inputs],
                            "outputs": [o.to_list() for o in s.outputs],
                            "tasks": len(s.parts),
                        }
                        for s in p.steps
                    ],
                }
                for p in self.partitions
            ],
        }

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> KernelPlan:
        """The runtime's view (attrs are not needed to call the object's functions)."""
        if d.get("schema_version") != SCHEMA_VERSION:
            raise ValueError(
                f"kernel plan schema_version {d.get('schema_version')!r}, expected {SCHEMA_VERSION}"
            )
        parts = tuple(
            PartitionKernels(
                p["partition"],
                p["entry"],
                tuple(
                    Step(
                        s["node"],
                        s["op"],
                        s["kernel"],
                        tuple(None if o is None else Operand.from_list(o) for o in s["inputs"]),
                        tuple(Operand.from_list(o) for o in s["outputs"]),
                        {},
                        False,
                    )
                    for s in p["steps"]
                ),
            )
            for p in d["partitions"]
        )
        return cls(
            parts,
            int(d["packed_bytes"]),
            tuple(Operand.from_list(o) for o in d["inputs"]),
            tuple(Operand.from_list(o) for o in d["outputs"]),
            d.get("main"),
        )


def build_kernel_plan(
    view: GraphView,
    memory: Any,  # MemoryPlan
    group_of: tuple[int, ...],
    partition_backends: tuple[str, ...],
    weights_offsets: Mapping[str, int],
    constants: Mapping[str, np.ndarray],
    pack: Any,  # (op, attrs, input index, array, input shapes) -> packed array or None
    split: Any = None,  # Step -> its tasks, () for one call (guard.compiler.codegen.split)
    plan_constants: Any = None,  # (op, attrs, {index: array}, inputs, outputs) -> (packs, facts)
    # a pack is an array, or (array, the operand's shape) where the kernel's tasks cut it
) -> tuple[KernelPlan, np.ndarray]:
    """The kernel plan and the packed-constants blob (uint8)."""
    slots = memory.slots
    elided = set(memory.elided_nodes)
    packed_chunks: list[tuple[int, np.ndarray]] = []
    packed_off = 0
    packed_cache: dict[tuple[str, str, str], Operand] = {}

    def operand(name: str) -> Operand:
        t = view.tensors[name]
        if name in slots:
            return Operand(name, "arena", slots[name].offset, t.shape, t.dtype)
        return Operand(name, "weights", weights_offsets[name], t.shape, t.dtype)

    by_partition: dict[int, list[Step]] = {}
    order = [i for i in memory.order]
    for i in order:
        n = view.nodes[i]
        pid = group_of[i]
        if partition_backends[pid] != "native" or n.name in elided:
            continue
        ins: list[Operand | None] = [operand(v) if v else None for v in n.args]
        in_shapes = [None if o is None else o.shape for o in ins]
        attrs = dict(n.attrs)
        node_packs: dict[int, np.ndarray] | None = None
        if plan_constants is not None:
            # Kernels that specialise on several constants at once (the int8 ones: weights,
            # zero points and scales fold into one packed block and a few facts).
            values = {
                j: constants[o.name]
                for j, o in enumerate(ins)
                if o is not None and o.space == "weights"
            }
            got = plan_constants(n.op, n.attrs, values, ins, [operand(v) for v in n.outputs])
            if got is not None:
                node_packs, facts = got
                attrs.update(facts)
        for j, o in enumerate(ins):
            if o is None or o.space != "weights":
                continue
            shape = o.shape  # the operand keeps the constant's own shape (kernels and keys
            # read it), unless a node's planner gives the pack's own: (array, shape)
            digest = ""
            if node_packs is not None:
                packed = node_packs.get(j)
                if isinstance(packed, tuple):
                    packed, shape = packed
                if packed is not None:  # packs of several constants: the bytes are the key
                    digest = hashlib.sha1(np.ascontiguousarray(packed).tobytes()).hexdigest()
            else:
                packed = pack(n.op, n.attrs, j, constants[o.name], in_shapes)
            if packed is None:
                continue
            ck = (o.name, f"{n.op}:{j}:{kernel_key(n.op, attrs, ins, (), False)}", digest)
            if ck not in packed_cache:
                arr = np.ascontiguousarray(packed)
                if arr.dtype == np.float64:
                    arr = arr.astype(np.float32)
                packed_chunks.append((packed_off, arr))
                packed_cache[ck] = Operand(
                    f"{o.name}@packed", "packed", packed_off, tuple(shape), arr.dtype.name
                )
                packed_off += align(arr.nbytes, ALIGNMENT)
            ins[j] = packed_cache[ck]
        outs = tuple(operand(v) for v in n.outputs)
        may_alias = any(
            o.space == "arena" and x is not None and x.space == "arena"
            and x.offset < o.offset + o.nbytes and o.offset < x.offset + x.nbytes
            for o in outs for x in ins
        )  # fmt: skip
        by_partition.setdefault(pid, []).append(
            Step(n.name, n.op, "", tuple(ins), outs, attrs, may_alias)
        )
    # One function per distinct kernel key, named by op and first use; a split step's
    # own symbol is its task function (one per step: the tasks' pointers are its own).
    names: dict[str, str] = {}

    def named(s: Step) -> Step:
        key = s.key
        if key not in names:
            names[key] = f"k{len(names)}_{s.op.lower()}"
        return dataclasses.replace(s, kernel=names[key])

    parts = []
    n_tasks = 0
    for pid in sorted(by_partition):
        steps = []
        for s in by_partition[pid]:
            tasks = tuple(named(t) for t in (split(s) if split else ()))
            if tasks:
                steps.append(
                    dataclasses.replace(s, kernel=f"t{n_tasks}_{s.op.lower()}", parts=tasks)
                )
                n_tasks += 1
            else:
                steps.append(named(s))
        parts.append(PartitionKernels(pid, f"guard_part{pid}", tuple(steps)))
    blob = np.zeros(packed_off, np.uint8)
    for off, arr in packed_chunks:
        blob[off : off + arr.nbytes] = np.frombuffer(arr.tobytes(), np.uint8)
    all_native = all(b == "native" for b in partition_backends)
    plan = KernelPlan(
        tuple(parts),
        packed_off,
        tuple(operand(i) for i in view.inputs if i in slots),
        tuple(operand(o) for o in view.outputs),
        "guard_main" if all_native else None,
    )
    return plan, blob
