"""The bundled compiler's typed graph IR.

A :class:`Graph` is a list of :class:`Node` in topological order over named values.

- Every value has a static ``shape`` (``tuple[int, ...]``, ``()`` for a scalar) and a numpy
  ``dtype``; there are no symbolic dims (the importer binds them or refuses the model).
- A :class:`Value` is a *placeholder* (a graph input, or the output of a node); a
  :class:`Constant` is a Value that also carries ``data`` (a numpy array of exactly that
  shape and dtype). The optimiser may read constants and replace them; it never mutates a
  constant's array in place (arrays are shared between clones).
- Single assignment: each name is defined once (graph input, constant, or one node output).
  ``graph.values`` maps every name to its Value/Constant; ``graph.inputs`` and
  ``graph.outputs`` list names in signature order.
- A :class:`Node` has ``op`` (an IR op name: ONNX names where the semantics match, with
  every attribute's default filled in and shape-like operands resolved into attributes;
  plus fused ops such as ``FusedElementwise``), ``inputs`` and ``outputs`` (value names;
  ``""`` is an omitted optional input), ``attrs`` (JSON-like: int, float, str, bool, lists
  and dicts of those) and a ``name`` for messages.

After O2 some nodes carry ``attrs["layout"]`` ("NCHW16c", "NHWC"; see layout.py: their first
input and output are in that layout, and ``Relayout``/``Transpose`` nodes convert at region
edges), and view-able nodes carry ``attrs["view"]`` ("alias", "concat", "split", "slice": the
memory planner's answer for the graph's order, reported by passes/elide_concat.py; the
frozen MemoryPlan decides). Dtypes: f16/f32/f64, i8-i64, u8-u64, bool, and bf16, float8
and int4/uint4 through ml_dtypes (names in DTYPE_NAMES).

The reference kernels (guard/compiler/reference/) define each op's semantics; the shape
functions (guard/compiler/ir/shapes.py) its typing; guard/compiler/ir/text.py its text form.
"""

from __future__ import annotations

import copy
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from typing import Any, TypeAlias

import ml_dtypes
import numpy as np

Shape = tuple[int, ...]

# One IR attribute's value: an int, float, str or bool, a list or dict of those, a numpy
# array, or a Graph (an If branch, a Loop body). Any rather than that union: the importer
# fills every default, so each reader knows its op's attribute types, and the union would
# make every read (in the shape functions, the passes and the code generator) narrow what
# the op already fixes.
AttrValue: TypeAlias = Any
Attrs: TypeAlias = dict[str, AttrValue]  # a node's attributes, by ONNX attribute name


# Short dtype names used by the text form and in messages.
DTYPE_NAMES: dict[str, np.dtype] = {
    "f16": np.dtype(np.float16),
    "f32": np.dtype(np.float32),
    "f64": np.dtype(np.float64),
    "i8": np.dtype(np.int8),
    "i16": np.dtype(np.int16),
    "i32": np.dtype(np.int32),
    "i64": np.dtype(np.int64),
    "u8": np.dtype(np.uint8),
    "u16": np.dtype(np.uint16),
    "u32": np.dtype(np.uint32),
    "u64": np.dtype(np.uint64),
    "bool": np.dtype(np.bool_),
}
try:  # bfloat16, float8 and 4-bit types, as onnx itself represents them (ml_dtypes)
    import ml_dtypes

    for _name, _attr in (
        ("bf16", "bfloat16"), ("f8e4m3fn", "float8_e4m3fn"), ("f8e4m3fnuz", "float8_e4m3fnuz"),
        ("f8e5m2", "float8_e5m2"), ("f8e5m2fnuz", "float8_e5m2fnuz"), ("i4", "int4"), ("u4", "uint4"),
    ):  # fmt: skip
        if hasattr(ml_dtypes, _attr):
            DTYPE_NAMES[_name] = np.dtype(getattr(ml_dtypes, _attr))
except ImportError:  # pragma: no cover - onnx depends on ml_dtypes
    pass
_NAME_OF_DTYPE = {v: k for k, v in DTYPE_NAMES.items()}


def dtype_name(dtype: np.dtype) -> str:
    """Short name of a supported dtype ("f32"); KeyError for unsupported ones."""
    return _NAME_OF_DTYPE[np.dtype(dtype)]


def dtype_from_name(name: str) -> np.dtype:
    return DTYPE_NAMES[name]


def is_float(dtype: np.dtype) -> bool:
    """numpy floats and the ml_dtypes floats (bf16, float8), whose numpy kind is 'V'."""
    dtype = np.dtype(dtype)
    return dtype.kind == "f" or _NAME_OF_DTYPE.get(dtype, "").startswith(("bf", "f8"))


def value_range(dtype: np.dtype) -> tuple[float, float]:
    """(lowest, highest) representable value: -inf/inf for floats with infinities."""
    dtype = np.dtype(dtype)
    if dtype.kind == "b":
        return False, True
    if dtype.kind in "iu":
        info = np.iinfo(dtype)
        return info.min, info.max

    if is_float(dtype):
        f = ml_dtypes.finfo(dtype)
        has_inf = not _NAME_OF_DTYPE[dtype].endswith(("fn", "fnuz"))
        return (-np.inf, np.inf) if has_inf else (float(f.min), float(f.max))
    i = ml_dtypes.iinfo(dtype)
    return int(i.min), int(i.max)


@dataclass
class Value:
    """A typed value: a placeholder (graph input or node output)."""

    name: str
    shape: Shape
    dtype: np.dtype

    def __post_init__(self) -> None:
        self.shape = tuple(int(d) for d in self.shape)
        self.dtype = np.dtype(self.dtype)

    @property
    def size(self) -> int:
        return int(np.prod(self.shape, dtype=np.int64))

    @property
    def nbytes(self) -> int:
        return self.size * self.dtype.itemsize

    def type_str(self) -> str:
        return f"{dtype_name(self.dtype)}[{','.join(str(d) for d in self.shape)}]"


@dataclass
class Constant(Value):
    """A value known at compile time; ``data`` has exactly ``shape`` and ``dtype``."""

    data: np.ndarray = field(default_factory=lambda: np.zeros(()), repr=False)

    @classmethod
    def of(cls, name: str, data: np.ndarray) -> Constant:
        arr = np.asarray(data)
        return cls(name, arr.shape, arr.dtype, arr)


@dataclass(eq=False)  # nodes compare by identity: two equal-looking nodes are distinct
class Node:
    """One operation: ``outputs = op(inputs; attrs)``."""

    op: str
    inputs: list[str]
    outputs: list[str]
    attrs: Attrs = field(default_factory=dict)
    name: str = ""

    def label(self) -> str:
        return f"{self.op} node {self.name or self.outputs[0]!r}"


class Graph:
    """Nodes in topological order over a table of typed values (see module docstring)."""

    def __init__(self, name: str = "main") -> None:
        self.name = name
        self.inputs: list[str] = []
        self.outputs: list[str] = []
        self.values: dict[str, Value] = {}
        self.nodes: list[Node] = []
        self._counter = 0

    # -- construction -------------------------------------------------------------------
    def add_input(self, name: str, shape: Iterable[int], dtype: Any) -> Value:
        v = Value(name, tuple(shape), np.dtype(dtype))
        self.values[name] = v
        self.inputs.append(name)
        return v

    def add_constant(self, name: str | None, data: np.ndarray, hint: str = "c") -> Constant:
        name = name if name is not None else self.fresh(hint)
        c = Constant.of(name, data)
        self.values[name] = c
        return c

    def add_node(
        self,
        op: str,
        inputs: list[str],
        out_types: list[tuple[Shape, Any]],
        attrs: Attrs | None = None,
        *,
        name: str | None = None,
        outputs: list[str] | None = None,
        index: int | None = None,
    ) -> Node:
        """Append (or insert at ``index``) a node with fresh output names unless given."""
        outs = outputs or [self.fresh(op.lower()) for _ in out_types]
        for o, (shape, dtype) in zip(outs, out_types, strict=True):
            self.values[o] = Value(o, tuple(shape), np.dtype(dtype))
        node = Node(op, list(inputs), outs, dict(attrs or {}), name or self.fresh_node(op))
        if index is None:
            self.nodes.append(node)
        else:
            self.nodes.insert(index, node)
        return node

    def fresh(self, hint: str = "v") -> str:
        while True:
            self._counter += 1
            name = f"{hint}_{self._counter}"
            if name not in self.values:
                return name

    def fresh_node(self, op: str) -> str:
        self._counter += 1
        return f"{op.lower()}_{self._counter}"

    # -- queries ------------------------------------------------------------------------
    def is_constant(self, name: str) -> bool:
        return isinstance(self.values.get(name), Constant)

    def const(self, name: str) -> np.ndarray | None:
        v = self.values.get(name)
        return v.data if isinstance(v, Constant) else None

    @property
    def constants(self) -> dict[str, Constant]:
        return {k: v for k, v in self.values.items() if isinstance(v, Constant)}

    def producers(self) -> dict[str, Node]:
        return {o: n for n in self.nodes for o in n.outputs}

    def consumers(self) -> dict[str, list[Node]]:
        out: dict[str, list[Node]] = {}
        for n in self.nodes:
            for i in n.inputs:
                if i:
                    out.setdefault(i, []).append(n)
        return out

    def use_counts(self) -> dict[str, int]:
        """Uses per value name, counting graph outputs as uses."""
        counts: dict[str, int] = {}
        for n in self.nodes:
            for i in n.inputs:
                if i:
                    counts[i] = counts.get(i, 0) + 1
        for o in self.outputs:
            counts[o] = counts.get(o, 0) + 1
        return counts

    def op_counts(self) -> dict[str, int]:
        counts: dict[str, int] = {}
        for n in self.nodes:
            counts[n.op] = counts.get(n.op, 0) + 1
        return dict(sorted(counts.items()))

    def __iter__(self) -> Iterator[Node]:
        return iter(self.nodes)

    # -- rewriting helpers --------------------------------------------------------------
    def replace_uses(self, old: str, new: str) -> None:
        """Point every use of ``old`` (node inputs and graph outputs) at ``new``.

        Hazard: when ``old`` is a graph output and ``new`` is a graph input or another
        output, the output would alias it; callers that must keep the output name distinct
        insert an Identity instead (see eliminate_dead_code / simplify_algebra).
        """
        for n in self.nodes:
            n.inputs = [new if i == old else i for i in n.inputs]
        self.outputs = [new if o == old else o for o in self.outputs]

    def prune_values(self) -> None:
        """Drop value-table entries that nothing defines-and-uses (unused constants, etc.)."""
        live = set(self.inputs) | set(self.outputs)
        for n in self.nodes:
            live.update(i for i in n.inputs if i)
            live.update(n.outputs)
        self.values = {k: v for k, v in self.values.items() if k in live}

    def clone(self) -> Graph:
        """A structural copy; constant arrays are shared (never mutated in place)."""
        g = Graph(self.name)
        g.inputs = list(self.inputs)
        g.outputs = list(self.outputs)
        g.values = {
            k: (
                Constant(v.name, v.shape, v.dtype, v.data)
                if isinstance(v, Constant)
                else Value(v.name, v.shape, v.dtype)
            )
            for k, v in self.values.items()
        }
        g.nodes = [
            Node(n.op, list(n.inputs), list(n.outputs), copy.deepcopy(n.attrs), n.name)
            for n in self.nodes
        ]
        g._counter = self._counter
        return g
