"""The counted figure of a result in a run: which artefact to count, and against what.

``guard run --counted`` (or ``measure.counted`` in the suite) adds to every result a
``counted`` block: instructions, bytes loaded and bytes stored per inference after warm-up,
counted by guard.counting.count, under the emulator or by the host's hardware counter
(``measure.counted.engine``, ``--counted-engine``; the same artefact either way). Which
artefact is counted:

- onnxruntime: its source model, optimised at the artefact's level, in Python under
  ``qemu-x86_64 -cpu max`` (the payload is blocked for the building host's vectors);
- bundled for AArch64 (or any target the emulator runs): the result's own artefact;
- bundled or tvm for this x86_64 host: the same model built beside it for the fixed
  counting target ``x86-64-v3`` (emulators run AVX2, not AVX-512, and one target for
  every host makes counts of two machines comparable). Its path and target are in the
  block.

A counted run that crashes or runs past ``max_s`` becomes ``counted: {"error": ...}``
naming the model and the reason; the rest of the result stands. No emulator or C compiler
installed: one line naming the Debian packages, and no counted blocks in the run.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

from guard.backends import get_backend
from guard.core.errors import GuardError
from guard.counting.count import CountedConfig, count_artefact
from guard.counting.emulator import CountingFailed
from guard.counting.rows import CountedRowJson, counted_row
from guard.counting.verdict import DEFAULT_COUNTED_REGRESS_PCT, compare_counted
from guard.emulate.tools import ToolMissing
from guard.manifest.target_string import target_arch
from guard.results.counted import Counted
from guard.results.documents import CountedRow, ResultsDocument
from guard.results.manifest import Manifest
from guard.run.build import build_artefact
from guard.suite import ModelEntry

COUNTING_TARGET = "llvm -mtriple=x86_64-linux-gnu -mcpu=x86-64-v3"
# Backends whose artefact is machine code for its target: a host build may use AVX-512,
# which the emulator does not run, so they are counted as their x86-64-v3 sibling.
COMPILED_FOR_TARGET = ("bundled", "tvm")


def counted_config(
    entry: ModelEntry, forced: bool, engine: str | None = None
) -> CountedConfig | None:
    """The entry's ``measure.counted`` (or the defaults when ``--counted`` forces it);
    ``engine`` (``--counted-engine``) overrides its engine."""
    raw = entry.measure.get("counted")
    if raw is None and not forced and engine is None:
        return None
    cfg = CountedConfig.from_dict(raw, where=f"{entry.where}.measure.counted")
    return dataclasses.replace(cfg, engine=engine) if engine is not None else cfg


def count_case(case: Any, cfg: CountedConfig, workdir: Path, missing: list[str]) -> Counted | None:
    """The ``counted`` block of one loaded case, an ``{"error"}`` block, or None when the
    tools are missing (the line saying so is appended to ``missing`` once). The block is
    read once, here, from the JSON guard.counting.count writes (and writes back as read)."""
    if missing:
        return None
    entry, backend = case.entry, case.backend
    artefact, manifest = case.artefact, case.manifest
    canonical = str(Manifest.of(manifest).target.canonical)
    built: dict[str, str] = {}
    try:
        if backend in COMPILED_FOR_TARGET and target_arch(canonical) == "x86_64":
            counting_entry = dataclasses.replace(entry, target=COUNTING_TARGET)
            artefact, manifest, _, _ = build_artefact(
                get_backend(backend), counting_entry, case.spec, backend, workdir
            )
            canonical = str(Manifest.of(manifest).target.canonical)
            built = {"artefact": str(artefact)}
        block = count_artefact(backend, artefact, case.feeds, cfg, target=canonical,
                               model=case.spec.path)  # fmt: skip
    except ToolMissing as exc:
        missing.append(str(exc))
        return None
    except (CountingFailed, GuardError) as exc:
        return Counted.from_json(
            {"error": f"counted run of {entry.name} [{backend}] failed: {exc}"}
        )
    return Counted.from_json({**block, **built})


def counted_against(
    entry: ModelEntry, block: Counted | None, baseline: ResultsDocument | None, key: Any
) -> tuple[float, CountedRow | None]:
    """(bound in percent, the counted comparison against the baseline's same result: the
    row guard.counting.verdict.compare_counted writes, read)."""
    counted = entry.checks.counted
    pct = counted.regress_pct if counted is not None else None
    bound = float(DEFAULT_COUNTED_REGRESS_PCT if pct is None else pct)
    if block is None or baseline is None:
        return bound, None
    base = next(
        (r for r in baseline.results if r.manifest.to_json() and r.key == key),
        None,
    )
    return bound, compare_counted(base.counted if base else None, block, bound)


def count_pairs(
    pairs: Any, workdirs: tuple[Path, Path], missing: list[str]
) -> list[CountedRowJson]:
    """Counted rows of ``guard ab --counted``: each matched (base, head) case counted in its
    own work directory and compared as ``guard compare`` compares counted blocks."""
    rows: list[CountedRowJson] = []
    for b, h in pairs:
        blocks = []
        for case, workdir in ((b, workdirs[0]), (h, workdirs[1])):
            cfg = counted_config(case.entry, True) or CountedConfig()
            blocks.append(count_case(case, cfg, workdir, missing))
        if missing:
            return []
        bound, _ = counted_against(h.entry, None, None, None)
        row = compare_counted(blocks[0], blocks[1], bound)
        on = blocks[1] if blocks[1] is not None else blocks[0]  # head's block, else base's
        counted_on = on.target if on is not None else None
        rows.append(counted_row(b.model, b.backend, b.target, counted_on, row))
    return rows
