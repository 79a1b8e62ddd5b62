"""Limits before work: what a model may ask of the host, checked from its declared shapes.

A suite's ``limits:`` block (top level, or per model to override it) caps three things,
each checked before anything is built, run or loaded into memory::

    limits:
      max_tensor_bytes: 1073741824   # every input, declared output and golden array
      max_subgraph_depth: 8          # If/Loop/Scan bodies inside bodies
      max_nodes: 400000              # nodes, subgraphs included

A model past one is refused with exit 2 naming the tensor or node and the limit. The
defaults are scaled to the host's memory (the smaller of physical memory and the cgroup's
limit), because what they guard against is running out of it:

- ``max_tensor_bytes``: a 32nd of memory, at least 64 MiB, at most 2 GiB. guard holds
  about ten copies of an output at once (the golden's, each backend's, the differences);
  a declared 1 GiB output took 9.9 GB of RSS before it failed (issue 27).
- ``max_nodes``: one per 64 KiB of memory, at least 50,000, at most 2,000,000 (a model of
  half a million nodes in nested If bodies took 19.3 GB; real exported models have
  thousands to tens of thousands).
- ``max_subgraph_depth``: 8, whatever the memory: exporters nest control flow two or
  three deep, and a tree of bodies doubles with every level.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from guard.core.errors import ModelError
from guard.suite.fields import Fields

MIB = 1024**2
LIMIT_KEYS = {"max_tensor_bytes", "max_subgraph_depth", "max_nodes"}
DEFAULT_SUBGRAPH_DEPTH = 8
_HINT = "Raise it in the suite's limits block (limits: {{{key}: N}}) if the model needs it."


@dataclass(frozen=True)
class Limits:
    """What one model may ask of the host (see the module docstring)."""

    max_tensor_bytes: int
    max_subgraph_depth: int
    max_nodes: int


def host_memory_bytes() -> int:
    """Physical memory, or the cgroup (v2) memory limit when that is smaller."""
    try:
        total = os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
    except (ValueError, OSError, AttributeError):
        total = 8 * 1024**3
    try:
        text = Path("/sys/fs/cgroup/memory.max").read_text().strip()
        if text.isdigit():
            total = min(total, int(text))
    except OSError:
        pass
    return max(int(total), 1)


def default_limits(memory: int | None = None) -> Limits:
    """The defaults for a host with ``memory`` bytes (this host's when None)."""
    mem = host_memory_bytes() if memory is None else memory
    return Limits(
        max_tensor_bytes=min(max(mem // 32, 64 * MIB), 2 * 1024**3),
        max_subgraph_depth=DEFAULT_SUBGRAPH_DEPTH,
        max_nodes=min(max(mem // (64 * 1024), 50_000), 2_000_000),
    )


def parse_limits(ctx: Fields, raw: Any, key: str, base: Limits) -> Limits:
    """A ``limits:`` block over ``base``: each key a positive integer."""
    block = ctx.mapping(raw, key, LIMIT_KEYS)
    values = {k: getattr(base, k) for k in LIMIT_KEYS}
    for k, v in block.items():
        values[k] = int(ctx.number(v, f"{key}.{k}", integer=True, positive=True))
    return Limits(**values)


def _limit_error(what: str, key: str, where: str | None) -> ModelError:
    return ModelError(f"{what}, over limits.{key}", where=where, hint=_HINT.format(key=key))


def check_graph(model: Any, limits: Limits, where: str | None) -> None:
    """Node count and subgraph nesting of an ONNX model, walked iteratively (no recursion,
    so a hostile depth cannot exhaust the stack either)."""
    nodes = 0
    stack: list[tuple[Any, int]] = [(model.graph, 0)]
    while stack:
        graph, depth = stack.pop()
        nodes += len(graph.node)
        if nodes > limits.max_nodes:
            raise _limit_error(
                f"has more than {limits.max_nodes} nodes (subgraphs included)", "max_nodes", where
            )
        for node in graph.node:
            for attr in node.attribute:
                subs = ([attr.g] if attr.HasField("g") else []) + list(attr.graphs)
                if subs and depth + 1 > limits.max_subgraph_depth:
                    name = node.name or f"{node.op_type} node"
                    raise _limit_error(
                        f"node {name!r} ({node.op_type}) nests its subgraph "
                        f"{attr.name!r} {depth + 1} deep, past {limits.max_subgraph_depth}",
                        "max_subgraph_depth",
                        where,
                    )
                stack.extend((g, depth + 1) for g in subs)


def check_tensor_bytes(
    kind: str, name: str, shape: tuple[int, ...], itemsize: int, limits: Limits, where: str | None
) -> None:
    """An input or output of ``shape`` fits ``max_tensor_bytes``."""
    nbytes = itemsize
    for d in shape:
        nbytes *= int(d)
    if nbytes > limits.max_tensor_bytes:
        raise _limit_error(
            f"{kind} {name!r} with shape {list(shape)} needs {_size(nbytes)}, more than "
            f"{_size(limits.max_tensor_bytes)}",
            "max_tensor_bytes",
            where,
        )


def _size(n: int) -> str:
    return f"{n / 2**30:.2f} GiB" if n >= 2**30 else f"{n / MIB:.1f} MiB"
