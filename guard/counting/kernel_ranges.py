"""The generated kernels' address ranges in a static runner, for per-kernel counts.

A bundled artefact's kernel plan (``kernels.json``) names each step's generated function;
the runner linked from its ``kernels.o`` is a static, position-dependent executable, so
each function's symbol (address and size, from the cross toolchain's ``nm``) is where its
instructions run under the emulator. The counting plugin counts the instructions of each
range apart (guard.counting.emulator.run_counted's ``ranges``).
"""

from __future__ import annotations

import json
import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path

from guard.compiler.codegen.kernel_plan import KernelPlan
from guard.emulate.tools import require


@dataclass(frozen=True)
class KernelRange:
    symbol: str
    start: int
    end: int  # exclusive
    op: str
    nodes: tuple[str, ...]  # the plan's steps that call this function (none: the entry)


def _nm(compiler: str) -> str | None:
    name = Path(compiler).name
    cross = name[: -len("gcc")] + "nm" if name.endswith("gcc") else "nm"
    return shutil.which(cross) or shutil.which("nm")


def kernel_ranges(artefact: Path, runner: Path, arch: str) -> list[KernelRange]:
    """The plan's kernel functions and its entry (``main``, op ``entry``: the glue between
    kernels) in ``runner``, sorted by address; [] when the symbols cannot be read (no
    ``nm``): the counts then stand without per-kernel figures."""
    plan = KernelPlan.from_dict(json.loads((Path(artefact) / "kernels.json").read_text()))
    uses: dict[str, tuple[str, list[str]]] = {}
    for step in plan.steps():
        for s in step.parts or (step,):
            uses.setdefault(s.kernel, (step.op, []))[1].append(step.node)
    for p in plan.partitions:
        uses.setdefault(p.entry, ("entry", []))
    if plan.main:
        uses.setdefault(plan.main, ("entry", []))
    nm = _nm(require(arch)[2])
    if nm is None:
        return []
    out = subprocess.run([nm, "-S", "--defined-only", str(runner)], capture_output=True,
                         text=True, timeout=60, check=False)  # fmt: skip
    ranges = []
    for line in out.stdout.splitlines():
        parts = line.split()
        if len(parts) == 4 and parts[3] in uses and int(parts[1], 16) > 0:
            start = int(parts[0], 16)
            op, nodes = uses[parts[3]]
            ranges.append(KernelRange(parts[3], start, start + int(parts[1], 16), op,
                                      tuple(dict.fromkeys(nodes))))  # fmt: skip
    return sorted(ranges, key=lambda r: r.start)
