"""The counted figure of one result: instructions and bytes moved per inference.

``count_artefact`` runs an artefact's inference ``warmup + inferences`` times and counts
only the last ``inferences``, one region each, with one of two engines
(``measure.counted.engine``):

- ``emulator``: QEMU user mode with guard's TCG plugin (guard.counting.emulator):
  instructions, loads and stores, bytes loaded and stored, on any host, for both
  architectures;
- ``pmu``: the host's hardware counter (guard.counting.pmu): user-mode instructions at
  native speed, no bytes (null, with the reason), where ``perf_event_open`` counts
  instructions and the counted artefact runs natively here;
- ``auto`` (the default): ``pmu`` where it can count, else the emulator. ``pmu`` asked for
  where it cannot count falls back to the emulator too. Either way the block says which
  engine counted and why (``engine_note``, one line), and the engine is the first field of
  the fingerprint: counts of two engines are never compared.

Where the artefact runs:

- a bundled artefact whose every partition is generated code runs in the static runner
  (``runner.c``, built for the artefact's architecture) under ``qemu-x86_64`` or
  ``qemu-aarch64``, or natively with the counter: only the generated entry is counted;
- any other artefact (onnxruntime, tvm, a bundled artefact with host partitions) runs in a
  Python interpreter (guard.counting.child) under ``qemu-x86_64 -cpu max``, where the
  runtime picks the kernels the emulated CPU offers (AVX2, no AVX-512), or natively with
  the counter, where it picks this CPU's; only the inference is counted, not interpreter
  start-up or loading.

The result is the ``counted`` block of a result, per inference after warm-up (the counted
inference with the fewest instructions), with a fingerprint: two blocks with equal
fingerprints are comparable exactly; a differing field makes them not comparable at all
(guard.counting.verdict). Counted runs are single-threaded.
"""

from __future__ import annotations

import hashlib
import json
import os
import sys
import tempfile
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, NotRequired, TypedDict

import numpy as np

from guard.core.errors import UsageError
from guard.counting.child import ChildRequest
from guard.counting.emulator import Engine, Region, engine, run_counted
from guard.counting.kernel_ranges import KernelRange, kernel_ranges
from guard.counting.pmu import BYTES_NOTE, PmuEngine, pmu_engine, pmu_status, run_native
from guard.emulate.runner import build_runner, call_args
from guard.emulate.tools import host_arch
from guard.suite.blocks import COUNTED_ENGINES as ENGINES

# Files of an artefact that record how it was built, not what runs.
_NOT_PAYLOAD = {"manifest.json", "build.json", "hashes.json"}
DEFAULT_INFERENCES = 5
DEFAULT_WARMUP = 3
DEFAULT_MAX_S = 900.0
# Runtimes that pick their kernels from the CPU they run on (no target of their own).
RUNTIME_BACKENDS = ("onnxruntime", "openvino")


@dataclass(frozen=True)
class CountedConfig:
    """``measure.counted``: how many inferences to count, after how many uncounted ones,
    within how many seconds, and by which engine (auto, emulator, pmu)."""

    inferences: int = DEFAULT_INFERENCES
    warmup: int = DEFAULT_WARMUP
    max_s: float = DEFAULT_MAX_S
    engine: str = "auto"

    @classmethod
    def from_dict(cls, raw: Any, where: str) -> CountedConfig:
        if raw is None or raw is True:
            return cls()
        if not isinstance(raw, Mapping):
            raise UsageError(
                f"{where}: expected a mapping such as {{inferences: 5, max_s: 900}}",
                where=where,
            )
        unknown = sorted(set(raw) - {"inferences", "warmup", "max_s", "engine"})
        if unknown:
            raise UsageError(f"{where}: unknown key(s) {unknown}",
                             hint="Use inferences, warmup, max_s and engine.")  # fmt: skip
        chosen = raw.get("engine", "auto")
        if chosen not in ENGINES:
            raise UsageError(f"unknown engine {chosen!r}", where=f"{where}.engine",
                             hint="Use auto, emulator or pmu.")  # fmt: skip
        inferences, warmup, max_s = (
            raw.get("inferences", DEFAULT_INFERENCES),
            raw.get("warmup", DEFAULT_WARMUP),
            raw.get("max_s", DEFAULT_MAX_S),
        )
        ok = (
            isinstance(inferences, int) and not isinstance(inferences, bool) and inferences >= 1
            and isinstance(warmup, int) and not isinstance(warmup, bool) and warmup >= 0
            and isinstance(max_s, int | float) and not isinstance(max_s, bool) and max_s > 0
        )  # fmt: skip
        if not ok:
            raise UsageError(
                f"{where}: inferences must be an integer >= 1, warmup >= 0, max_s > 0 "
                f"(got inferences={inferences!r}, warmup={warmup!r}, max_s={max_s!r})",
                where=where,
            )
        return cls(int(inferences), int(warmup), float(max_s), str(chosen))


def artefact_sha256(artefact: Path) -> str:
    """sha256 over the artefact's payload files (names and bytes), not its build records."""
    h = hashlib.sha256()
    root = Path(artefact)
    for p in sorted(q for q in root.rglob("*") if q.is_file()):
        rel = p.relative_to(root).as_posix()
        if rel in _NOT_PAYLOAD:
            continue
        h.update(rel.encode() + b"\0")
        with p.open("rb") as f:
            for chunk in iter(lambda: f.read(1 << 20), b""):
                h.update(chunk)
    return h.hexdigest()


def inputs_sha256(feeds: Mapping[str, np.ndarray]) -> str:
    h = hashlib.sha256()
    for name in sorted(feeds):
        a = np.ascontiguousarray(feeds[name])
        h.update(f"{name}\0{a.dtype.str}\0{list(a.shape)}\0".encode())
        h.update(a.tobytes())
    return h.hexdigest()


def _guard_root() -> str:
    import guard

    return str(Path(guard.__file__).resolve().parent.parent)


def _not_native(arch: str, target: str | None) -> str | None:
    """Why the counted artefact (code for ``arch``, built for ``target``; None: the host's
    own runtime) cannot run natively here, or None when it can."""
    host = host_arch()
    if arch != host:
        return f"{arch} code does not run on this {host} host"
    if target is None:
        return None
    from guard.compiler.codegen.llvm_target import codegen_target, runnable_here
    from guard.core.errors import GuardError

    try:
        why = runnable_here(codegen_target(target))
    except GuardError as exc:
        return f"cannot tell whether {target} runs here ({exc})"
    return f"the counted build cannot run here: {why}" if why else None


def choose_engine(requested: str, arch: str, target: str | None) -> tuple[PmuEngine | None, str]:
    """(the hardware-counter engine, or None for the emulator; why, in one line).

    ``requested`` is ``measure.counted.engine``: ``emulator`` is obeyed; ``auto`` and
    ``pmu`` count with the hardware counter where pmu_status() finds one and the counted
    artefact runs natively, else fall back to the emulator and say why."""
    if requested == "emulator":
        return None, "counted under the emulator (engine: emulator)"
    asked = "engine pmu asked for, but " if requested == "pmu" else ""
    ok, why = pmu_status()
    if ok:
        why = _not_native(arch, target) or ""
    if why:
        return None, f"{asked}{why}: counted under the emulator"
    eng = pmu_engine()
    return eng, f"counted by the hardware counter (perf_event_open {eng.event.name}) on {eng.cpu}"


def _count_in_runner(
    entry: Any,
    artefact: Path,
    feeds: Mapping[str, np.ndarray],
    cfg: CountedConfig,
    what: str,
    pmu: PmuEngine | None,
) -> tuple[Engine | PmuEngine, list[Region], list[KernelRange]]:
    """Count a whole-graph bundled artefact (``entry``, its EntryPoint) in the static
    runner; under the emulator each kernel function apart too."""
    emu = engine(entry.arch) if pmu is None else None
    runner = build_runner(entry.object_path, entry.arch, mains=[entry.main], what=what,
                          emulated=pmu is None)  # fmt: skip
    kernels = kernel_ranges(artefact, runner, entry.arch) if pmu is None else []
    sample = [np.ascontiguousarray(feeds[t.name], dtype=t.dtype).tobytes() for t in entry.inputs]
    with tempfile.TemporaryDirectory(prefix="guard-counted-") as tmp:
        args, _ = call_args(
            runner, Path(tmp), symbol=entry.main, arena_bytes=entry.arena_bytes,
            weights=entry.weights_path, packed=entry.packed_path,
            inputs=[sample] * (cfg.warmup + cfg.inferences),
            output_nbytes=[t.nbytes for t in entry.outputs],
        )  # fmt: skip
        env = {**os.environ, "GUARD_THREADS": "1", "GUARD_COUNT_FROM": str(cfg.warmup)}
        if emu is None:
            assert pmu is not None
            out = Path(tmp) / "counts.txt"
            return pmu, run_native(pmu, args, timeout_s=cfg.max_s, env=env, out=out), []
        regions = run_counted(emu, args, timeout_s=cfg.max_s, env=env,
                              ranges=[(k.start, k.end) for k in kernels])  # fmt: skip
    return emu, regions, kernels


def _count_in_python(
    backend: str,
    artefact: Path,
    feeds: Mapping[str, np.ndarray],
    cfg: CountedConfig,
    model: Path | None = None,
    pmu: PmuEngine | None = None,
) -> tuple[Engine | PmuEngine, list[Region]]:
    emu = engine("x86_64") if pmu is None else None
    with tempfile.TemporaryDirectory(prefix="guard-counted-") as tmp_name:
        tmp = Path(tmp_name)
        arrays = {k: np.asarray(v) for k, v in feeds.items()}
        # numpy's stub types the keyword arrays as if one could be named allow_pickle (bool)
        np.savez(tmp / "inputs.npz", **arrays)  # type: ignore[arg-type]
        spec: ChildRequest = {"backend": backend, "artefact": str(artefact), "inputs": str(tmp / "inputs.npz"),
                "warmup": cfg.warmup, "inferences": cfg.inferences,
                "model": str(model) if model else None}  # fmt: skip
        (tmp / "spec.json").write_text(json.dumps(spec))
        pythonpath = os.pathsep.join(p for p in (_guard_root(), os.environ.get("PYTHONPATH")) if p)
        env = {**os.environ, "PYTHONPATH": pythonpath, "PYTHONHASHSEED": "0",
               "OMP_NUM_THREADS": "1", "PYTHONMALLOC": "malloc", "TVM_NUM_THREADS": "1", "GUARD_THREADS": "1"}  # fmt: skip
        argv = [sys.executable, "-m", "guard.counting.child", str(tmp / "spec.json")]
        if emu is None:
            assert pmu is not None
            return pmu, run_native(pmu, argv, timeout_s=cfg.max_s, env=env, out=tmp / "counts.txt")
        regions = run_counted(emu, argv, timeout_s=cfg.max_s, env=env)
    return emu, regions


def _number(x: int | None) -> float | None:
    return None if x is None else float(x)


class KernelCount(TypedDict):
    """One kernel function's instructions in the counted inference, and what it runs."""

    instructions: int
    op: str
    nodes: list[str]


class CountedJson(TypedDict):
    """A result's ``counted`` block as ``count_artefact`` writes it (read back as
    guard.results.counted.Counted)."""

    engine: str
    target: str
    arch: str
    runs_in: str
    inferences: int
    warmup: int
    instructions: float
    bytes_loaded: float | None
    bytes_stored: float | None
    loads: float | None
    stores: float | None
    spread_pct: float
    wall_s: float
    engine_note: str
    pmu: str
    bytes_note: NotRequired[str]
    kernels: NotRequired[dict[str, KernelCount]]
    # the engine's, then target and the artefact's and inputs' hashes (written last)
    fingerprint: NotRequired[dict[str, str]]


def count_artefact(
    backend: str,
    artefact: Path,
    feeds: Mapping[str, np.ndarray],
    cfg: CountedConfig,
    *,
    target: str,
    model: Path | None = None,
    clock: Callable[[], float] = time.monotonic,
) -> CountedJson:
    """The ``counted`` block of one result (per inference, after warm-up).

    ``target`` is the canonical target the artefact was built for; ``model`` the source
    model (onnxruntime re-optimises it for the counting CPU: its optimised payload is
    blocked for the building host's vector width). Raises ToolMissing
    (no emulator or C compiler), CountingFailed (crash, budget), or the emulation errors.
    """
    from guard.emulate.bundled import main_entry_point

    t0 = clock()
    what = f"artefact {artefact}"
    entry = main_entry_point(artefact) if backend == "bundled" else None
    if entry is not None:
        pmu, note = choose_engine(cfg.engine, entry.arch, target)
        eng, regions, kernels = _count_in_runner(entry, artefact, feeds, cfg, what, pmu)
        arch, where, counting_target = entry.arch, "static runner", target
    else:
        # Python runs natively under the counter; a runtime's own build is the host's.
        runtime = backend in RUNTIME_BACKENDS
        pmu, note = choose_engine(cfg.engine, host_arch(), None if runtime else target)
        eng, regions = _count_in_python(backend, artefact, feeds, cfg, model, pmu)
        kernels, where = [], "python"
        # Runtimes pick their kernels from the CPU they run on: emulated, or this one.
        arch, cpu = ("x86_64", "qemu -cpu max") if pmu is None else (pmu.arch, f"native {pmu.cpu}")
        counting_target = cpu if runtime else f"{target} ({cpu})"
    n = len(regions)
    instr = [r.instructions for r in regions]
    least = min(
        regions, key=lambda r: (r.instructions, (r.bytes_loaded or 0) + (r.bytes_stored or 0))
    )
    fingerprint = eng.fingerprint()
    block: CountedJson = {
        "engine": fingerprint["engine"],
        "target": counting_target,
        "arch": arch,
        "runs_in": where,
        "inferences": n,
        "warmup": cfg.warmup,
        # The inference with the fewest instructions: what an inference can add is work
        # (onnxruntime's arena, a lazily resolved symbol), never less, so the least of them
        # is the figure every process reaches.
        "instructions": float(least.instructions),
        # None (null) where the engine counts no bytes: the hardware counter.
        "bytes_loaded": _number(least.bytes_loaded),
        "bytes_stored": _number(least.bytes_stored),
        "loads": _number(least.loads),
        "stores": _number(least.stores),
        "spread_pct": (max(instr) - min(instr)) / max(min(instr), 1) * 100.0,
        "wall_s": round(clock() - t0, 3),
        # Which engine counted and why (the fallback to the emulator is said), and what
        # the PMU probe answered.
        "engine_note": note,
        "pmu": pmu_status()[1],
    }
    if least.bytes_loaded is None:
        block["bytes_note"] = BYTES_NOTE
    if kernels:
        # Per kernel function, in the same inference as the figure: instructions, and the
        # op and nodes it runs (kernel symbols are per build; nodes are what two builds share).
        block["kernels"] = {
            k.symbol: {"instructions": least.per_range.get(i, 0), "op": k.op,
                       "nodes": list(k.nodes)}
            for i, k in enumerate(kernels)
        }  # fmt: skip
    block["fingerprint"] = {
        **fingerprint,
        "target": counting_target,
        "artefact_sha256": artefact_sha256(artefact),
        "input_sha256": inputs_sha256(feeds),
    }
    return block
