"""A Session (guard.backends.base) over an artefact for a foreign architecture.

``EntryPoint`` says what the runner needs from an artefact: its object file, the main
entry symbol (``guard_main(arena, weights, packed, inputs, outputs)``), the arena size,
the weights and packed-constants files and the entry's inputs and outputs in call order.
The session feeds the entry through the emulated runner and returns the outputs as numpy
arrays; partitions and memory come from the artefact's own metadata, exactly as on the
host, because they are facts of the build, not of the machine that runs it. Latency is
never measured here: ``latency_status`` says why.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from guard.backends.base import MemoryInfo, PartitionInfo
from guard.core.errors import ModelError
from guard.emulate.runner import DEFAULT_TIMEOUT_S, build_runner, run_main
from guard.emulate.tools import toolchain


@dataclass(frozen=True)
class TensorSlot:
    """One entry argument: its graph name, dtype and static shape."""

    name: str
    dtype: str
    shape: tuple[int, ...]

    @property
    def nbytes(self) -> int:
        return int(np.dtype(self.dtype).itemsize * int(np.prod(self.shape, dtype=np.int64)))


@dataclass(frozen=True)
class EntryPoint:
    """What the runner calls: ``main(arena, weights, packed, inputs[], outputs[])``."""

    arch: str
    object_path: Path
    main: str
    arena_bytes: int
    weights_path: Path
    packed_path: Path
    inputs: tuple[TensorSlot, ...]
    outputs: tuple[TensorSlot, ...]


class EmulatedSession:
    """Runs an artefact's generated code under user-mode emulation; never times it."""

    latency_status = "emulated"

    def __init__(
        self,
        entry: EntryPoint,
        *,
        what: str,
        partitions: Callable[[], PartitionInfo],
        memory: Callable[[], MemoryInfo],
        timeout_s: float = DEFAULT_TIMEOUT_S,
        cache_dir: Path | None = None,
        threads: int = 1,
    ) -> None:
        self.entry = entry
        self.threads = threads
        self.what = what
        self.emulator = toolchain(entry.arch).emulator
        self.timeout_s = timeout_s
        self._partitions, self._memory = partitions, memory
        self.input_names = [t.name for t in entry.inputs]
        self.output_names = [t.name for t in entry.outputs]
        self.runner = build_runner(
            entry.object_path, entry.arch, mains=[entry.main], what=what, cache_dir=cache_dir
        )

    @property
    def latency_reason(self) -> str:
        return (
            f"skipped: emulated ({self.emulator}): {self.entry.arch} code is not timed on this host"
        )

    def _sample(self, feeds: dict[str, np.ndarray]) -> list[bytes]:
        missing = [t.name for t in self.entry.inputs if t.name not in feeds]
        if missing:
            raise ModelError(
                f"missing input(s) {missing}",
                where=self.what,
                hint=f"The entry takes {self.input_names}.",
            )
        out = []
        for t in self.entry.inputs:
            a = np.asarray(feeds[t.name])
            if tuple(a.shape) != t.shape:
                raise ModelError(
                    f"input {t.name!r} has shape {list(a.shape)}, the artefact "
                    f"was built for {list(t.shape)}",
                    where=self.what,
                )
            out.append(np.ascontiguousarray(a, dtype=t.dtype).tobytes())
        return out

    def run_many(self, feeds: Sequence[dict[str, np.ndarray]]) -> list[list[np.ndarray]]:
        """Every sample in one emulator start (a data set is not one start per sample)."""
        raw = run_main(self.runner, self.entry.arch, symbol=self.entry.main,
                       arena_bytes=self.entry.arena_bytes, weights=self.entry.weights_path,
                       packed=self.entry.packed_path, inputs=[self._sample(f) for f in feeds],
                       output_nbytes=[t.nbytes for t in self.entry.outputs],
                       what=self.what, timeout_s=self.timeout_s,
                       threads=self.threads)  # fmt: skip
        return [[np.frombuffer(b, dtype=t.dtype).reshape(t.shape).copy()
                 for b, t in zip(sample, self.entry.outputs, strict=True)] for sample in raw]  # fmt: skip

    def run(self, feeds: dict[str, np.ndarray]) -> list[np.ndarray]:
        return self.run_many([feeds])[0]

    def partitions(self) -> PartitionInfo:
        return self._partitions()

    def memory(self) -> MemoryInfo:
        return self._memory()

    def describe(self) -> dict[str, str]:
        """How the numbers of this session were obtained (for the result)."""
        return {"emulator": self.emulator, "arch": self.entry.arch,
                "runner": str(self.runner), "entry": self.entry.main}  # fmt: skip
