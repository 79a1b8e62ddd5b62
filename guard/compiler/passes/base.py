"""Pass infrastructure: a pass is a dataclass whose fields are its options.

``Pass.run(graph)`` rewrites ``graph`` in place and returns a :class:`PassResult`: whether
anything changed, counters (``num_folded``, ``num_fused``, ...) and notes (one line per
declined match or decision worth showing a person). The pipeline clones the input once,
runs the passes in order and, when asked, verifies after each one.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any, ClassVar

import numpy as np

from guard.compiler.ir.core import Constant, Graph, Node, Value


@dataclass
class PassResult:
    changed: bool
    stats: dict[str, int] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)


@dataclass
class Pass:
    """Base class; subclasses set ``name`` and implement ``run``."""

    name: ClassVar[str] = "pass"

    def run(self, graph: Graph) -> PassResult:  # pragma: no cover - abstract
        raise NotImplementedError


def scalar_const(graph: Graph, name: str) -> float | None:
    """The value of a constant whose elements are all equal, else None."""
    data = graph.const(name)
    if data is None or data.size == 0:
        return None
    flat = data.reshape(-1)
    first = flat[0]
    if data.dtype.kind == "f" and np.isnan(first):
        return None
    if not np.all(flat == first):
        return None
    return float(first)


def bypass(graph: Graph, node: Node, out: str, replacement: str) -> bool:
    """Make uses of ``out`` (an output of ``node``) read ``replacement``; the caller then
    deletes ``node``. Returns False (and changes nothing) when that is unsafe.

    Hazard: a graph output must keep its name and must not become an alias of a graph
    input, a constant or another output (the session returns outputs by name, and callers
    may write into them). When ``out`` is a graph output we instead rename the producer of
    ``replacement`` to write ``out`` directly, which is safe only when ``node`` is the sole
    reader of ``replacement``.
    """
    if out not in graph.outputs:
        graph.replace_uses(out, replacement)
        return True
    if replacement in graph.outputs or replacement in graph.inputs:
        return False
    if isinstance(graph.values.get(replacement), Constant):
        return False
    producer = next((n for n in graph.nodes if replacement in n.outputs), None)
    if producer is None or graph.use_counts().get(replacement, 0) != 1:
        return False
    v = graph.values.pop(replacement)
    graph.values[out] = Value(out, v.shape, v.dtype)
    producer.outputs = [out if o == replacement else o for o in producer.outputs]
    dead = graph.fresh("dead")
    node.outputs = [dead if o == out else o for o in node.outputs]
    graph.values[dead] = Value(dead, v.shape, v.dtype)
    return True


def single_consumer(graph: Graph, value: str, consumers: dict[str, list[Node]]) -> Node | None:
    """The only node reading ``value`` (and it is not a graph output), else None."""
    users = consumers.get(value, [])
    if len(users) != 1 or value in graph.outputs:
        return None
    if users[0].inputs.count(value) != 1:
        return None
    return users[0]


def attrs_key(attrs: dict[str, Any]) -> str:
    return json.dumps(attrs, sort_keys=True, default=str)
