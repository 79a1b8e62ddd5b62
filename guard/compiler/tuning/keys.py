"""Tuning-task keys: operator, full shape signature, dtype, canonical target, compiler.

A key is exact text, so a look-up is a string compare: a hit is an exact match and
nothing else. The parts are kept apart (:class:`TaskKey`) so that a miss can say which
part of the nearest key differs and how: "target differs: +sve added", "shape differs:
dim 0 (M) 127 vs 128", "compiler 0.2.0 vs 0.1.0".

Why the compiler version is part of the key: a schedule is measured on the kernels one
code generator emits, and a new compiler may emit other kernels for it, or (the trap this
guards against) canonicalise the target string differently, so that every key changes at
once. A bump is a total miss, loudly, and the nightly job re-tunes.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TypedDict

from guard.manifest.target_string import TargetError, target_changes

OPS = ("gemm", "conv")


class TaskKeyJson(TypedDict):
    """A key's fields in a cache entry (``shape`` as [dim name, value] pairs)."""

    op: str
    shape: list[list[str | int]]
    dtype: str
    target: str
    compiler: str


@dataclass(frozen=True)
class TaskKey:
    op: str
    shape: tuple[tuple[str, int | str], ...]  # (dim name, value), in signature order
    dtype: str
    target: str  # canonical target string
    compiler: str

    @property
    def text(self) -> str:
        dims = ",".join(f"{k}={v}" for k, v in self.shape)
        return f"{self.op} {self.dtype} [{dims}] target={self.target} compiler={self.compiler}"

    def short(self) -> str:
        """The key without its target (for messages that name the target once)."""
        dims = ",".join(f"{k}={v}" for k, v in self.shape)
        return f"{self.op} {self.dtype} [{dims}]"

    def to_dict(self) -> TaskKeyJson:
        return {
            "op": self.op,
            "shape": [[k, v] for k, v in self.shape],  # pairs: signature order survives sort_keys
            "dtype": self.dtype,
            "target": self.target,
            "compiler": self.compiler,
        }

    @classmethod
    def from_dict(cls, d: TaskKeyJson) -> TaskKey:
        return cls(
            str(d["op"]),
            tuple((str(k), v) for k, v in d["shape"]),
            str(d["dtype"]),
            str(d["target"]),
            str(d["compiler"]),
        )


def target_difference(want: str, have: str) -> list[str]:
    """How ``want`` (the build's target) differs from ``have`` (the cache's): '+sve added'."""
    try:
        changes = target_changes(have, want)
    except TargetError as exc:
        return [f"unreadable here ({exc})"]
    parts: list[str] = []
    for k, h, w in changes:
        if k != "mattr":
            parts.append(f"{k} {w} vs {h}")
            continue
        parts += [f"{','.join(h)} added"] if h else []
        parts += [f"{','.join(w)} removed"] if w else []
    return parts


def differences(want: TaskKey, have: TaskKey) -> list[str]:
    """Each differing part of two keys, one phrase each, the build's value first."""
    out: list[str] = []
    if want.op != have.op:
        out.append(f"op {want.op} vs {have.op}")
    else:
        wd, hd = dict(want.shape), dict(have.shape)
        names = [k for k, _ in want.shape] + [k for k, _ in have.shape if k not in wd]
        dims = []
        for i, k in enumerate(names):
            if wd.get(k) != hd.get(k):
                dims.append(f"dim {i} ({k}) {wd.get(k)} vs {hd.get(k)}")
        if dims:
            out.append("shape differs: " + ", ".join(dims))
    if want.dtype != have.dtype:
        out.append(f"dtype {want.dtype} vs {have.dtype}")
    if want.target != have.target:
        t = target_difference(want.target, have.target)
        out.append("target differs: " + ("; ".join(t) if t else "spelling"))
    if want.compiler != have.compiler:
        out.append(f"compiler {want.compiler} vs {have.compiler}")
    return out


def _distance(want: TaskKey, have: TaskKey) -> tuple[int, float]:
    """(differing parts, how far apart the shapes are): smaller is nearer."""
    parts = len(differences(want, have)) + (4 if want.op != have.op else 0)
    spread = 0.0
    if want.op == have.op:
        hd = dict(have.shape)
        for k, v in want.shape:
            o = hd.get(k)
            if isinstance(v, int) and isinstance(o, int):
                spread += abs(v - o) / max(abs(v), abs(o), 1)
            elif v != o:
                spread += 1.0
    else:
        spread = 1e9
    return parts, spread


def nearest(want: TaskKey, keys: list[TaskKey]) -> TaskKey | None:
    """The cache key nearest to ``want`` (fewest differing parts, then closest shape)."""
    if not keys:
        return None
    return min(keys, key=lambda k: (*_distance(want, k), k.text))
