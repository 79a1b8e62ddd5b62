"""Reading a suite file: bounded bytes, safe YAML with capped alias expansion, one-line errors.

A suite is a small hand-written file. Its bytes, and the nodes its YAML aliases expand to,
are capped so that an alias bomb or a multi-GB file cannot exhaust memory while loading or
while an error message shows a value.

Two departures from PyYAML's YAML 1.1 reading, both where a hand-written file means
something else: a key given twice in one mapping is an error naming its line (YAML 1.1
lets the last one win silently, so a second ``suite:`` replaced the first), and a float
is read by YAML 1.2's rule, so ``rtol: 1e-3`` is the number 0.001 (YAML 1.1 wants a dot,
``1.0e-3``, and reads ``1e-3`` as a string).
"""

from __future__ import annotations

import hashlib
import re
from pathlib import Path
from typing import Any

import yaml

from guard.core.errors import SuiteError
from guard.core.fsutil import BoundedReadError, read_bounded
from guard.suite.entries import Suite
from guard.suite.resolve import parse_suite

MAX_SUITE_BYTES = 4 * 1024 * 1024
MAX_YAML_NODES = 200_000  # after alias expansion


# YAML 1.2 core schema floats: the exponent needs no dot, the dot needs no digits after it.
# Integers still match PyYAML's int rule first (it comes earlier in the resolver list).
_FLOAT_1_2 = re.compile(
    r"^(?:[-+]?(?:\.[0-9]+|[0-9]+(?:\.[0-9]*)?)(?:[eE][-+]?[0-9]+)?"
    r"|[-+]?\.(?:inf|Inf|INF)|\.(?:nan|NaN|NAN))$"
)


class BoundedLoader(yaml.SafeLoader):
    """PyYAML's safe loader, refusing documents whose aliases expand past MAX_YAML_NODES,
    refusing a key given twice in one mapping, and reading YAML 1.2 floats."""

    def get_single_node(self) -> yaml.Node | None:
        node = super().get_single_node()
        if node is not None:
            _check_expansion(node)
        return node

    def construct_mapping(self, node: yaml.MappingNode, deep: bool = False) -> dict[Any, Any]:
        # Before the merge keys (<<) are flattened: a key after `<<: *base` overrides it.
        if isinstance(node, yaml.MappingNode):
            seen: dict[Any, yaml.Node] = {}
            for key_node, _ in node.value:
                if key_node.tag == "tag:yaml.org,2002:merge" or not isinstance(
                    key_node, yaml.ScalarNode
                ):
                    continue
                key = self.construct_object(key_node)
                if not isinstance(key, str | int | float | bool) and key is not None:
                    continue
                if key in seen:
                    first = seen[key].start_mark.line + 1
                    raise yaml.constructor.ConstructorError(
                        None,
                        None,
                        f"duplicate key {key!r} (first given on line {first})",
                        key_node.start_mark,
                    )
                seen[key] = key_node
        return super().construct_mapping(node, deep=deep)


BoundedLoader.add_implicit_resolver("tag:yaml.org,2002:float", _FLOAT_1_2, list("-+0123456789."))


def _check_expansion(root: yaml.Node) -> None:
    """Count the nodes ``root`` expands to (aliases counted each time), iteratively."""
    weight: dict[int, int] = {}
    on_path: set[int] = set()
    stack: list[tuple[yaml.Node, bool]] = [(root, False)]
    while stack:
        node, done = stack.pop()
        nid = id(node)
        if done:
            on_path.discard(nid)
            kids = _children(node)
            weight[nid] = 1 + sum(weight[id(k)] for k in kids)
            if weight[nid] > MAX_YAML_NODES:
                raise yaml.YAMLError(
                    f"aliases expand to more than {MAX_YAML_NODES} values (an alias bomb?)"
                )
            continue
        if nid in weight:
            continue
        if nid in on_path:
            raise yaml.YAMLError("an alias refers to the value that contains it")
        on_path.add(nid)
        stack.append((node, True))
        stack.extend((k, False) for k in _children(node) if id(k) not in weight)


def _children(node: yaml.Node) -> list[yaml.Node]:
    if isinstance(node, yaml.SequenceNode):
        return list(node.value)
    if isinstance(node, yaml.MappingNode):
        return [x for pair in node.value for x in pair]
    return []


def load_suite(path: str | Path) -> Suite:
    """Read, parse and validate a suite file; every failure is a one-line SuiteError."""
    p = Path(path)
    try:
        raw = read_bounded(p, MAX_SUITE_BYTES)
    except FileNotFoundError:
        raise SuiteError(
            "suite file not found", where=str(p), hint="Pass a path to a suite .yaml (see suites/)."
        ) from None
    except BoundedReadError as exc:
        raise SuiteError(
            exc.reason, where=str(p), hint="Pass a suite .yaml file (see suites/)."
        ) from None
    try:
        text = raw.decode("utf-8")
        data = yaml.load(text, Loader=BoundedLoader)  # noqa: S506 - a SafeLoader subclass
    except UnicodeDecodeError:
        raise SuiteError("not a UTF-8 text file", where=str(p)) from None
    except RecursionError:
        raise SuiteError("invalid YAML: nested too deeply", where=str(p)) from None
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        loc = f"line {mark.line + 1}, column {mark.column + 1}: " if mark else ""
        problem = getattr(exc, "problem", None) or (str(exc).splitlines() or ["error"])[0]
        problem = problem if len(problem) <= 200 else problem[:197] + "..."
        raise SuiteError(f"{loc}invalid YAML: {problem}", where=str(p)) from None
    try:
        suite = parse_suite(data, p.resolve())
    except RecursionError:
        raise SuiteError("nested too deeply to be a suite", where=str(p)) from None
    # The suite hash pins the file's exact bytes: a changed bound is a changed suite.
    return Suite(
        name=suite.name,
        path=suite.path,
        sha256=hashlib.sha256(raw).hexdigest(),
        models=suite.models,
        description=suite.description,
    )
