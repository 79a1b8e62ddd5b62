"""Schedules as plain data: to and from the cache's JSON, validated per op.

- ``gemm``: :class:`guard.compiler.codegen.gemm.driver.GemmSchedule` (micro-tile ``mr x nr``,
  cache blocks ``kc/mc/nc``, k-unroll, loop order, ``use_blas``).
- ``conv``: :class:`guard.compiler.codegen.conv.schedule.ConvSchedule`, the knobs of the
  direct convolution the code generator emits for every Conv/FusedConv
  (guard/compiler/codegen/conv/emitter.py): output columns and output-channel vectors per
  register tile, reduction unroll, loop order. An entry written before the last three
  existed names only ``ow_block``; the others' defaults are what the emitter did then.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import asdict, fields

from guard.compiler.codegen.conv.schedule import ConvSchedule
from guard.compiler.codegen.gemm.schedule import GemmSchedule
from guard.compiler.codegen.llvm_target import CodegenTarget
from guard.core.json_types import Json
from guard.manifest.target_string import parse_target

Schedule = GemmSchedule | ConvSchedule
ScheduleJson = dict[str, int | bool | str]  # a schedule's fields (all int, bool or str)


def schedule_class(op: str) -> type:
    if op == "gemm":
        return GemmSchedule
    if op == "conv":
        return ConvSchedule
    raise ValueError(f"unknown op {op!r} (expected gemm or conv)")


def vector_width_of(target: str) -> int:
    """Float lanes the code generator uses for a canonical target (as CodegenTarget says)."""

    t = parse_target(target)
    return CodegenTarget(t.mtriple, t.mcpu or "generic", tuple(sorted(t.mattr))).vector_width


def to_dict(schedule: Schedule) -> ScheduleJson:
    return asdict(schedule)


def from_dict(op: str, d: Json, target: str) -> Schedule:
    """The schedule object for ``d`` (a cache entry's schedule as parsed), or ValueError
    saying which field is wrong."""
    cls = schedule_class(op)
    names = {f.name: f for f in fields(cls)}
    if not isinstance(d, Mapping):
        raise ValueError(f"schedule is {type(d).__name__}, expected an object")
    unknown = sorted(set(d) - set(names))
    if unknown:
        raise ValueError(f"unknown schedule field(s) {unknown} for {op}")
    for k, v in d.items():
        want = names[k].type
        if want in ("int", int) and (not isinstance(v, int) or isinstance(v, bool)):
            raise ValueError(f"schedule.{k}={v!r} is not an integer")
        if want in ("bool", bool) and not isinstance(v, bool):
            raise ValueError(f"schedule.{k}={v!r} is not true/false")
        if want in ("str", str) and not isinstance(v, str):
            raise ValueError(f"schedule.{k}={v!r} is not a string")
    try:
        s = cls(**d)
    except TypeError as exc:
        raise ValueError(f"schedule for {op}: {exc}") from None
    s.validate(vector_width_of(target))
    return s
