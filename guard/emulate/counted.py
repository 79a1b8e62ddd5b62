"""The counted figure of one result: instructions and bytes moved per inference.

``count_artefact`` runs an artefact's inference ``warmup + inferences`` times under the
counting engine (guard.emulate.counting) and counts only the last ``inferences``, one
marked region each:

- a bundled artefact whose every partition is generated code runs in the static runner
  (``runner.c``, built for the artefact's architecture) under ``qemu-x86_64`` or
  ``qemu-aarch64``: only the generated entry is counted;
- any other artefact (onnxruntime, tvm, a bundled artefact with host partitions) runs in a
  Python interpreter under ``qemu-x86_64 -cpu max`` (guard.emulate.count_child): the
  runtime picks the kernels the emulated CPU offers (AVX2, no AVX-512) and only the
  ``session.run`` call is counted, not interpreter start-up or loading.

The result is the ``counted`` block of a result, per inference after warm-up (the counted
inference with the fewest instructions), with a fingerprint: two blocks with equal
fingerprints are comparable exactly; a differing field makes them not comparable at all
(guard.stats.counted). Counted runs are single-threaded.
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
from typing import Any

import numpy as np

from guard.core.errors import UsageError
from guard.emulate.counting import Engine, Region, engine, run_counted
from guard.emulate.kernel_ranges import KernelRange, kernel_ranges
from guard.emulate.pmu import pmu_status
from guard.emulate.runner import build_runner, call_args

# Files of an artefact that record how it was built, not what runs.
_NOT_PAYLOAD = {"manifest.json", "build.json", "hashes.json"}
DEFAULT_INFERENCES = 5
DEFAULT_WARMUP = 3
DEFAULT_MAX_S = 900.0


@dataclass(frozen=True)
class CountedConfig:
    """``measure.counted``: how many inferences to count, after how many uncounted ones."""

    inferences: int = DEFAULT_INFERENCES
    warmup: int = DEFAULT_WARMUP
    max_s: float = DEFAULT_MAX_S

    @classmethod
    def from_dict(cls, raw: Any, where: str) -> CountedConfig:
        if raw is None or raw is True:
            return cls()
        if not isinstance(raw, Mapping):
            raise UsageError(
                f"{where}: expected a mapping such as {{inferences: 5, max_s: 900}}",
                where=where,
            )
        unknown = sorted(set(raw) - {"inferences", "warmup", "max_s"})
        if unknown:
            raise UsageError(f"{where}: unknown key(s) {unknown}",
                             hint="Use inferences, warmup and max_s.")  # fmt: skip
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
        return cls(int(inferences), int(warmup), float(max_s))


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


def _count_in_runner(
    artefact: Path, feeds: Mapping[str, np.ndarray], cfg: CountedConfig, what: str
) -> tuple[Engine, list[Region], str, list[KernelRange]] | None:
    """Count a whole-graph bundled artefact in the static runner, each kernel function
    apart; None if it has no main."""
    from guard.emulate.bundled import main_entry_point

    entry = main_entry_point(artefact)
    if entry is None:
        return None
    eng = engine(entry.arch)
    runner = build_runner(entry.object_path, entry.arch, mains=[entry.main], what=what)
    kernels = kernel_ranges(artefact, runner, entry.arch)
    sample = [np.ascontiguousarray(feeds[t.name], dtype=t.dtype).tobytes() for t in entry.inputs]
    with tempfile.TemporaryDirectory(prefix="guard-counted-") as tmp:
        args, _ = call_args(
            runner, Path(tmp), symbol=entry.main, arena_bytes=entry.arena_bytes,
            weights=entry.weights_path, packed=entry.packed_path,
            inputs=[sample] * (cfg.warmup + cfg.inferences),
            output_nbytes=[t.nbytes for t in entry.outputs],
        )  # fmt: skip
        env = {**os.environ, "GUARD_THREADS": "1", "GUARD_COUNT_FROM": str(cfg.warmup)}
        regions = run_counted(eng, args, timeout_s=cfg.max_s, env=env,
                              ranges=[(k.start, k.end) for k in kernels])  # fmt: skip
    return eng, regions, entry.arch, kernels


def _count_in_python(
    backend: str,
    artefact: Path,
    feeds: Mapping[str, np.ndarray],
    cfg: CountedConfig,
    model: Path | None = None,
) -> tuple[Engine, list[Region]]:
    eng = engine("x86_64")
    with tempfile.TemporaryDirectory(prefix="guard-counted-") as tmp_name:
        tmp = Path(tmp_name)
        arrays: dict[str, Any] = {k: np.asarray(v) for k, v in feeds.items()}
        np.savez(tmp / "inputs.npz", **arrays)
        spec = {"backend": backend, "artefact": str(artefact), "inputs": str(tmp / "inputs.npz"),
                "warmup": cfg.warmup, "inferences": cfg.inferences,
                "model": str(model) if model else None}  # fmt: skip
        (tmp / "spec.json").write_text(json.dumps(spec))
        pythonpath = os.pathsep.join(p for p in (_guard_root(), os.environ.get("PYTHONPATH")) if p)
        env = {**os.environ, "PYTHONPATH": pythonpath, "PYTHONHASHSEED": "0",
               "OMP_NUM_THREADS": "1", "PYTHONMALLOC": "malloc", "TVM_NUM_THREADS": "1", "GUARD_THREADS": "1"}  # fmt: skip
        argv = [sys.executable, "-m", "guard.emulate.count_child", str(tmp / "spec.json")]
        regions = run_counted(eng, argv, timeout_s=cfg.max_s, env=env)
    return eng, regions


def count_artefact(
    backend: str,
    artefact: Path,
    feeds: Mapping[str, np.ndarray],
    cfg: CountedConfig,
    *,
    target: str,
    model: Path | None = None,
    clock: Callable[[], float] = time.monotonic,
) -> dict[str, Any]:
    """The ``counted`` block of one result (per inference, after warm-up).

    ``target`` is the canonical target the artefact was built for; ``model`` the source
    model (onnxruntime re-optimises it for the emulated CPU: its optimised payload is
    blocked for the host's vector width). Raises ToolMissing
    (no emulator or C compiler), CountingFailed (crash, budget), or the emulation errors.
    """
    t0 = clock()
    what = f"artefact {artefact}"
    counted = _count_in_runner(artefact, feeds, cfg, what) if backend == "bundled" else None
    kernels: list[KernelRange] = []
    if counted is not None:
        eng, regions, arch, kernels = counted
        where = "static runner"
        counting_target = target
    else:
        eng, regions = _count_in_python(backend, artefact, feeds, cfg, model)
        arch, where = "x86_64", "python"
        # Runtimes pick their kernels from the CPU the emulator presents.
        counting_target = (
            "qemu -cpu max" if backend == "onnxruntime" else f"{target} (qemu -cpu max)"
        )
    n = len(regions)
    instr = [r.instructions for r in regions]
    least = min(regions, key=lambda r: (r.instructions, r.bytes_loaded + r.bytes_stored))
    block: dict[str, Any] = {
        "engine": eng.fingerprint()["engine"],
        "target": counting_target,
        "arch": arch,
        "runs_in": where,
        "inferences": n,
        "warmup": cfg.warmup,
        # The inference with the fewest instructions: what an inference can add is work
        # (onnxruntime's arena, a lazily resolved symbol), never less, so the least of them
        # is the figure every process reaches.
        "instructions": float(least.instructions),
        "bytes_loaded": float(least.bytes_loaded),
        "bytes_stored": float(least.bytes_stored),
        "loads": float(least.loads),
        "stores": float(least.stores),
        "spread_pct": (max(instr) - min(instr)) / max(min(instr), 1) * 100.0,
        "wall_s": round(clock() - t0, 3),
        # The fallback is said: where a PMU exists it is not used (one engine everywhere).
        "pmu": f"{pmu_status()[1]}; counted under the emulator ({eng.fingerprint()['engine']})",
    }
    if kernels:
        # Per kernel function, in the same inference as the figure: instructions, and the
        # op and nodes it runs (kernel symbols are per build; nodes are what two builds share).
        block["kernels"] = {
            k.symbol: {"instructions": least.per_range.get(i, 0), "op": k.op,
                       "nodes": list(k.nodes)}
            for i, k in enumerate(kernels)
        }  # fmt: skip
    block["fingerprint"] = {
        **eng.fingerprint(),
        "target": counting_target,
        "artefact_sha256": artefact_sha256(artefact),
        "input_sha256": inputs_sha256(feeds),
    }
    return block
