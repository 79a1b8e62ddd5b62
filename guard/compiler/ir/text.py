"""The IR's one stable text form, and its parser.

```
graph "main"
input x: f32[1,3]
const w: f32[3,2] = [0.5, 1.0, ...]          # small constants inline, flat, row-major
const big: f32[1000,2048] = external         # large ones supplied to parse_graph(weights=)
node "mm_1": y: f32[1,2] = MatMul(x, w) {}
output y
```

A subgraph attribute (an If branch, a Loop body) prints as ``{"$graph": "<its text>"}``;
its external constants come from the same ``weights`` mapping (the bundled artefact writes
each body as an artefact of its own instead).
Names that are not ``[A-Za-z0-9_./-]+`` are JSON-quoted (so ``""`` is an omitted
optional input). Attributes are JSON with sorted keys; floats print with ``repr`` and NaN /
Infinity as JSON's extensions, so the form round-trips exactly.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Mapping

import numpy as np

from guard.compiler.ir.core import (
    DTYPE_NAMES,
    Constant,
    Graph,
    Node,
    Value,
    dtype_from_name,
    dtype_name,
)
from guard.core.errors import ModelError

INLINE_MAX_ELEMENTS = 64
SUBGRAPH_KEY = "$graph"  # {"$graph": text}: a subgraph attribute (If branch, Loop body)
_BARE = re.compile(r"[A-Za-z0-9_./\-]+")


def _name(s: str) -> str:
    return s if _BARE.fullmatch(s) else json.dumps(s)


def _type(v: Value) -> str:
    return f"{dtype_name(v.dtype)}[{','.join(str(d) for d in v.shape)}]"


def _attrs(a: dict) -> str:
    return json.dumps(a, sort_keys=True, separators=(", ", ": "), default=_subgraph)


def _subgraph(obj: object) -> dict[str, str]:
    """An If branch or Loop body in a node's attributes: its own text, nested."""
    if isinstance(obj, Graph):
        return {SUBGRAPH_KEY: print_graph(obj)}
    raise TypeError(f"attribute value {obj!r} has no text form")


def _data(c: Constant) -> str:
    if c.size > INLINE_MAX_ELEMENTS:
        return "external"
    flat = c.data.reshape(-1)
    items: list[bool] | list[int] | list[float]
    if c.dtype.kind == "b":
        items = [bool(x) for x in flat]
    elif c.dtype.kind in "iu":
        items = [int(x) for x in flat]
    else:
        items = [float(x) for x in flat]
    return json.dumps(items)


def print_graph(graph: Graph) -> str:
    """The graph in the stable text form (one line per input, constant, node, output)."""
    lines = [f"graph {json.dumps(graph.name)}"]
    for i in graph.inputs:
        lines.append(f"input {_name(i)}: {_type(graph.values[i])}")
    for name, c in graph.constants.items():
        lines.append(f"const {_name(name)}: {_type(c)} = {_data(c)}")
    for n in graph.nodes:
        outs = ", ".join(f"{_name(o)}: {_type(graph.values[o])}" for o in n.outputs)
        args = ", ".join(_name(i) for i in n.inputs)
        lines.append(f"node {_name(n.name)}: {outs} = {n.op}({args}) {_attrs(n.attrs)}")
    for o in graph.outputs:
        lines.append(f"output {_name(o)}")
    return "\n".join(lines) + "\n"


class _Cursor:
    def __init__(self, line: str, lineno: int) -> None:
        self.s, self.i, self.lineno = line, 0, lineno

    def fail(self, what: str) -> ModelError:
        return ModelError(
            f"IR text line {self.lineno}, column {self.i + 1}: expected {what}: {self.s!r}",
            hint="Fix the text or regenerate it with print_graph.",
        )

    def ws(self) -> None:
        while self.i < len(self.s) and self.s[self.i] in " \t":
            self.i += 1

    def peek(self) -> str:
        self.ws()
        return self.s[self.i : self.i + 1]

    def expect(self, tok: str) -> None:
        self.ws()
        if not self.s.startswith(tok, self.i):
            raise self.fail(repr(tok))
        self.i += len(tok)

    def name(self) -> str:
        self.ws()
        if self.peek() == '"':
            return str(self.json())
        m = _BARE.match(self.s, self.i)
        if not m:
            raise self.fail("a name")
        self.i = m.end()
        return m.group(0)

    def json(self, hook: Callable[[dict], object] | None = None) -> object:
        self.ws()
        try:
            obj, end = json.JSONDecoder(object_hook=hook).raw_decode(self.s, self.i)
        except json.JSONDecodeError as exc:
            raise self.fail(f"JSON ({exc.msg})") from None
        self.i = end
        return obj

    def type(self) -> tuple[tuple[int, ...], np.dtype]:
        self.ws()
        m = re.compile(r"([a-z0-9]+)\[([0-9,]*)\]").match(self.s, self.i)
        if not m or m.group(1) not in _DTYPES:
            raise self.fail("a type like f32[1,3]")
        self.i = m.end()
        dims = tuple(int(d) for d in m.group(2).split(",") if d)
        return dims, dtype_from_name(m.group(1))

    def end(self) -> None:
        self.ws()
        if self.i != len(self.s):
            raise self.fail("end of line")


_DTYPES = set(DTYPE_NAMES)


def parse_graph(text: str, weights: Mapping[str, np.ndarray] | None = None) -> Graph:
    """Parse the text form; ``weights`` supplies constants printed as ``external``."""
    g = Graph()
    for lineno, raw in enumerate(text.splitlines(), 1):
        if not raw.strip():
            continue
        c = _Cursor(raw, lineno)
        kw = c.name()
        if kw == "graph":
            g.name = str(c.json())
        elif kw == "input":
            name = c.name()
            c.expect(":")
            shape, dtype = c.type()
            g.add_input(name, shape, dtype)
        elif kw == "const":
            name = c.name()
            c.expect(":")
            shape, dtype = c.type()
            c.expect("=")
            if c.peek() == "[":
                data = np.asarray(c.json(), dtype=dtype).reshape(shape)
            else:
                c.expect("external")
                if weights is None or name not in weights:
                    raise ModelError(
                        f"IR text line {lineno}: constant {name!r} is external but no weight "
                        "was supplied",
                        hint="Pass weights={name: array} to parse_graph.",
                    )
                data = np.asarray(weights[name])
                if data.shape != shape or data.dtype != dtype:
                    raise ModelError(
                        f"IR text line {lineno}: weight {name!r} is {data.dtype}{list(data.shape)}"
                        f", the text says {dtype}{list(shape)}",
                        hint="Supply the weights file that was written with this graph.",
                    )
            c.end()
            g.values[name] = Constant(name, shape, dtype, data)
        elif kw == "node":
            nname = c.name()
            c.expect(":")
            outs: list[tuple[str, tuple[int, ...], np.dtype]] = []
            while True:
                o = c.name()
                c.expect(":")
                shape, dtype = c.type()
                outs.append((o, shape, dtype))
                if c.peek() != ",":
                    break
                c.expect(",")
            c.expect("=")
            op = c.name()
            c.expect("(")
            args: list[str] = []
            if c.peek() != ")":
                while True:
                    args.append(c.name())
                    if c.peek() != ",":
                        break
                    c.expect(",")
            c.expect(")")
            attrs = c.json(
                lambda d: parse_graph(d[SUBGRAPH_KEY], weights) if set(d) == {SUBGRAPH_KEY} else d
            )
            if not isinstance(attrs, dict):
                raise c.fail("an attribute object {...}")
            c.end()
            for o, shape, dtype in outs:
                g.values[o] = Value(o, shape, dtype)
            g.nodes.append(Node(op, args, [o for o, _, _ in outs], attrs, nname))
        elif kw == "output":
            g.outputs.append(c.name())
            c.end()
        else:
            c.i = 0
            raise c.fail("one of graph/input/const/node/output")
    return g
