"""What a backend can run: composable support predicates, and the delegate profiles
(profiles/*.yaml) that build them.

Support is a composable predicate per backend: ``decline(node, graph)`` returns ``None``
(supported) or a reason ("op LRN is not in profile gpu-lite"). A :class:`PartitionTarget`
is a name, its predicate and its boundary costs (not a guard backend: those are
guard.backends); the partitioner (guard.compiler.partition.assign) asks the targets in priority
order and sees nothing else of them. The last one is the
fallback (``cpu``, the reference interpreter), which runs every op the importer produces
(control flow is refused at import).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import yaml

from guard.compiler.codegen import emitters
from guard.compiler.graph.view import CONTROL_FLOW_OPS, GraphView, OpNode
from guard.core.errors import UsageError
from guard.core.schema import Schema

# -- support predicates -------------------------------------------------------------------


class Support:
    """A support predicate: ``decline`` returns None (supported) or why not."""

    def decline(self, node: OpNode, g: GraphView) -> str | None:  # pragma: no cover
        raise NotImplementedError

    def __and__(self, other: Support) -> Support:
        return AllOf((self, other))


@dataclass(frozen=True)
class AllOf(Support):
    """Supported when every part supports; declines with every part's reason."""

    parts: tuple[Support, ...]

    def decline(self, node: OpNode, g: GraphView) -> str | None:
        reasons = [r for p in self.parts if (r := p.decline(node, g))]
        return "; ".join(reasons) if reasons else None


@dataclass(frozen=True)
class Anything(Support):
    def decline(self, node: OpNode, g: GraphView) -> str | None:
        return None


@dataclass(frozen=True)
class OpIn(Support):
    ops: frozenset[str]
    where: str = ""

    def decline(self, node: OpNode, g: GraphView) -> str | None:
        if node.op in self.ops:
            return None
        return f"op {node.op} is not supported{self.where}"


@dataclass(frozen=True)
class OpNotIn(Support):
    ops: frozenset[str]
    where: str = ""

    def decline(self, node: OpNode, g: GraphView) -> str | None:
        return f"op {node.op} is excluded{self.where}" if node.op in self.ops else None


@dataclass(frozen=True)
class DtypeIn(Support):
    """Every tensor the node reads or writes has one of ``dtypes`` (numpy names)."""

    dtypes: frozenset[str]

    def decline(self, node: OpNode, g: GraphView) -> str | None:
        for v in (*node.inputs, *node.outputs):
            if v and g.tensors[v].dtype not in self.dtypes:
                return f"tensor {v!r} is {g.tensors[v].dtype} (supported: {', '.join(sorted(self.dtypes))})"
        return None


@dataclass(frozen=True)
class AttrRule(Support):
    """One attribute limit on one op: ``kind`` is in, not_in, all_in, max or min."""

    op: str
    attr: str
    kind: str
    value: Any

    def decline(self, node: OpNode, g: GraphView) -> str | None:
        if node.op != self.op or self.attr not in node.attrs:
            return None
        got = node.attrs[self.attr]
        items = got if isinstance(got, (list, tuple)) else [got]
        ok = {
            "in": lambda: got in self.value or (isinstance(got, list) and tuple(got) in self.value),
            "not_in": lambda: got not in self.value,
            "all_in": lambda: all(x in self.value for x in items),
            "max": lambda: all(x <= self.value for x in items),
            "min": lambda: all(x >= self.value for x in items),
        }[self.kind]()
        if ok:
            return None
        want = list(self.value) if isinstance(self.value, (set, frozenset, tuple)) else self.value
        return f"{self.op} attribute {self.attr}={got} (needs {self.kind.replace('_', ' ')} {want})"


@dataclass(frozen=True)
class StaticShapes(Support):
    def decline(self, node: OpNode, g: GraphView) -> str | None:
        for v in (*node.inputs, *node.outputs):
            if v and not g.tensors[v].static:
                return f"dynamic axes in {v!r} {list(g.tensors[v].shape)}"
        return None


@dataclass(frozen=True)
class NoControlFlow(Support):
    def decline(self, node: OpNode, g: GraphView) -> str | None:
        if node.op in CONTROL_FLOW_OPS or node.has_subgraph:
            # The host evaluates the condition (trip count) and calls each branch (body),
            # compiled as a graph of its own (guard.compiler.partition.plan's subplans).
            return (
                f"control flow ({node.op}) runs on the host; each branch or loop body is "
                "compiled as its own subgraph"
            )
        return None


@dataclass(frozen=True)
class HasEmitter(Support):
    """The code generator has an emitter that takes this node (guard.compiler.codegen)."""

    def decline(self, node: OpNode, g: GraphView) -> str | None:
        if any(v and not g.tensors[v].static for v in (*node.inputs, *node.outputs)):
            return None  # StaticShapes declines it, with the tensor named

        try:
            return emitters.decline(node, g)
        except (KeyError, ValueError, TypeError, IndexError) as exc:  # an attribute it cannot read
            return f"no emitter for {node.op} with these attributes ({type(exc).__name__}: {exc})"


@dataclass(frozen=True)
class PartitionTarget:
    """A partition target: a name, a support predicate and its boundary costs."""

    name: str
    support: Support
    min_partition_size: int = 1
    bandwidth_gb_s: float = 10.0
    sync_us: float = 10.0
    fallback: bool = False
    description: str = ""


CPU = PartitionTarget(
    "cpu", Anything(), fallback=True, description="reference interpreter; runs every imported op"
)
NATIVE = PartitionTarget(
    "native",
    AllOf((NoControlFlow(), StaticShapes(), HasEmitter())),
    description="generated code (guard/compiler/codegen): ops with an emitter, static shapes",
)


# -- delegate profiles --------------------------------------------------------------------

PROFILE_DIR = Path(__file__).parents[1] / "profiles"
PROFILE_SCHEMA_VERSION = 1
_PROFILE = Schema(
    "delegate profile",
    PROFILE_SCHEMA_VERSION,
    f"Write it for schema_version {PROFILE_SCHEMA_VERSION} (see guard/compiler/profiles/*.yaml).",
)
_PROFILE_KEYS = {
    "schema_version", "name", "description", "ops", "exclude_ops", "dtypes", "attributes",
    "dynamic_shapes", "control_flow", "min_partition_size", "boundary", "codegen",
}  # fmt: skip
_RULE_KINDS = {"in", "not_in", "all_in", "max", "min"}


def list_profiles() -> list[str]:
    """Names of the delegate profiles shipped in guard/compiler/profiles/."""
    return sorted(p.stem for p in PROFILE_DIR.glob("*.yaml"))


def load_profile(profile: str | Path) -> PartitionTarget:
    """A shipped profile by name, or a YAML file by path, as a PartitionTarget."""
    path = Path(profile)
    if not path.suffix and (PROFILE_DIR / f"{profile}.yaml").is_file():
        path = PROFILE_DIR / f"{profile}.yaml"
    if not path.is_file():
        raise UsageError(
            f"delegate profile {str(profile)!r} not found",
            hint=f"Use a YAML file path or one of: {', '.join(list_profiles())}.",
        )
    try:
        data = yaml.safe_load(path.read_text())
    except yaml.YAMLError as exc:
        raise UsageError(f"not valid YAML: {exc}", where=str(path)) from exc
    return profile_from_dict(data, where=str(path))


def profile_from_dict(data: Any, where: str = "<profile>") -> PartitionTarget:
    """Validate a profile mapping (see profiles/*.yaml) and build its predicate."""

    def bad(key: str, msg: str) -> UsageError:
        return UsageError(f"key {key!r}: {msg}", where=where)

    if not isinstance(data, dict):
        raise UsageError("a profile must be a mapping", where=where)
    _PROFILE.check_version(data, _PROFILE.at(where))
    unknown = set(data) - _PROFILE_KEYS
    if unknown:
        raise bad(sorted(unknown)[0], f"unknown key; known: {', '.join(sorted(_PROFILE_KEYS))}")
    name = data.get("name")
    if not isinstance(name, str) or not name:
        raise bad("name", "a non-empty string is required")
    tag = f" by {name}"
    parts: list[Support] = []
    ops = data.get("ops", "*")
    if ops != "*":
        if not isinstance(ops, list) or not all(isinstance(o, str) for o in ops):
            raise bad("ops", 'a list of op names, or "*" for every op')
        parts.append(OpIn(frozenset(ops), tag))
    excl = data.get("exclude_ops", [])
    if not isinstance(excl, list):
        raise bad("exclude_ops", "a list of op names")
    if excl:
        parts.append(OpNotIn(frozenset(excl), tag))
    dtypes = data.get("dtypes", "*")
    if dtypes != "*":
        if not isinstance(dtypes, list):
            raise bad("dtypes", 'a list of numpy dtype names (int8, float32, ...) or "*"')
        for d in dtypes:
            try:
                np.dtype(d)
            except TypeError as exc:
                raise bad("dtypes", f"{d!r} is not a dtype name") from exc
        parts.append(DtypeIn(frozenset(np.dtype(d).name for d in dtypes)))
    attrs = data.get("attributes", {}) or {}
    if not isinstance(attrs, dict):
        raise bad("attributes", "a mapping op -> attribute -> {kind: value}")
    for op, rules in attrs.items():
        if not isinstance(rules, dict):
            raise bad(f"attributes.{op}", "a mapping attribute -> {kind: value}")
        for attr, rule in rules.items():
            key = f"attributes.{op}.{attr}"
            if not isinstance(rule, dict) or not rule or set(rule) - _RULE_KINDS:
                raise bad(key, f"a mapping with one or more of {sorted(_RULE_KINDS)}")
            for kind, value in rule.items():
                if kind in ("in", "not_in", "all_in"):
                    if not isinstance(value, list):
                        raise bad(key, f"{kind} takes a list")
                    value = tuple(tuple(v) if isinstance(v, list) else v for v in value)
                elif not isinstance(value, (int, float)):
                    raise bad(key, f"{kind} takes a number")
                parts.append(AttrRule(op, attr, kind, value))
    if not data.get("dynamic_shapes", False):
        parts.append(StaticShapes())
    if not data.get("control_flow", False):
        parts.append(NoControlFlow())
    codegen = data.get("codegen", False)
    if not isinstance(codegen, bool):
        raise bad(
            "codegen", "true (the partition runs generated code: ops need an emitter) or false"
        )
    if codegen:
        parts.append(HasEmitter())
    mps = data.get("min_partition_size", 1)
    if not isinstance(mps, int) or mps < 1:
        raise bad("min_partition_size", "a positive integer")
    boundary = data.get("boundary", {}) or {}
    if not isinstance(boundary, dict) or set(boundary) - {"bandwidth_gb_s", "sync_us"}:
        raise bad("boundary", "a mapping with bandwidth_gb_s and sync_us")
    return PartitionTarget(
        name=name,
        support=AllOf(tuple(parts)) if parts else Anything(),
        min_partition_size=mps,
        bandwidth_gb_s=float(boundary.get("bandwidth_gb_s", 10.0)),
        sync_us=float(boundary.get("sync_us", 10.0)),
        description=str(data.get("description", "")),
    )


def backends_for(profile: str | Path | PartitionTarget | None) -> list[PartitionTarget]:
    """The priority list: the profile's delegate (default: native), then the cpu fallback."""
    if profile is None:
        profile = "native"
    return [profile if isinstance(profile, PartitionTarget) else load_profile(profile), CPU]
