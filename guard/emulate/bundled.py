"""Emulated sessions over bundled artefacts built for another architecture.

The artefact is loaded and verified as on its own target (every file hashed, the plans
checked against the graph) but its object is not mapped into this process: the generated
code runs in the static runner under the emulator instead.

- Every partition native (the kernel plan has a ``main``): one ``guard_main`` call per
  inference, a whole data set per emulator start (:class:`EmulatedSession`).
- Some partitions on the host's reference interpreter (``cpu``): the bundled runtime runs
  them as usual, and each native partition's entry is a call into one long-lived emulated
  runner (:class:`PartitionServer`) over a copy of the arena in a shared file: the
  partitions, their boundaries and the arena are the artefact's own.

Partitions and memory are read from the artefact exactly as ``BundledSession`` reads them.
"""

from __future__ import annotations

import ctypes
import dataclasses
import json
import tempfile
import weakref
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from guard.backends.base import MemoryInfo, PartitionInfo, Session
from guard.backends.bundled import ArtefactSession, BundledSession
from guard.compiler.codegen.kernel_plan import KernelPlan
from guard.compiler.graph.exec_order import ALIGNMENT, view_of_graph
from guard.compiler.runtime.artefact import LoadedArtefact, load_artefact
from guard.core.errors import UnsupportedOpError
from guard.core.json_types import Json
from guard.emulate.runner import (
    DEFAULT_TIMEOUT_S,
    PartitionServer,
    build_runner,
    emulation_timeout_s,
)
from guard.emulate.session import EmulatedSession, EntryPoint, TensorSlot
from guard.emulate.tools import toolchain

if TYPE_CHECKING:
    from _ctypes import CFuncPtr


def _metadata_session(loaded: LoadedArtefact) -> ArtefactSession:
    """The bundled backend's own partitions/memory reader over a loaded artefact."""
    reader = ArtefactSession.__new__(ArtefactSession)  # no runtime: the object is foreign
    reader.loaded = loaded
    return reader


def _arch_of(codegen: Mapping[str, Json]) -> str:
    """The architecture of the artefact's code (its manifest's codegen block, as loaded)."""
    return str(codegen["triple"]).split("-")[0]


def load_emulated(artefact_dir: Path, threads: int, *, timeout_s: float | None = None) -> Session:
    """A session that runs ``artefact_dir``'s generated code under the emulator.

    ``timeout_s`` bounds each emulator start (default: ``emulation_timeout_s()``).
    """
    timeout_s = timeout_s if timeout_s is not None else emulation_timeout_s()

    root = Path(artefact_dir)
    loaded = load_artefact(root, native=False)
    if loaded.subs:
        raise UnsupportedOpError(
            "the artefact has control flow (If/Loop on the host, each body an artefact of "
            "its own under sub/); the emulator runs one generated object per artefact",
            where=str(root),
            hint="Run this model on a host of its target architecture.",
        )
    codegen = loaded.manifest.get("codegen")
    if not codegen:
        # No generated code (every partition on the reference interpreter): nothing is
        # architecture-specific, so the artefact runs here as it would there.
        return BundledSession(root, threads)
    plan = KernelPlan.from_dict(_read_json(root / "kernels.json"))
    meta = _metadata_session(loaded)
    what = f"artefact {root}"
    arch = _arch_of(codegen)
    if plan.main:
        entry = _entry_point(root, loaded, plan, arch)
        session = EmulatedSession(
            entry, what=what, partitions=meta.partitions, memory=meta.memory, timeout_s=timeout_s,
            threads=threads,
        )  # fmt: skip
        session.input_names = list(view_of_graph(loaded.graph).inputs)
        return session
    return MixedEmulatedSession(
        loaded, plan, meta, arch, what=what, timeout_s=timeout_s, threads=threads
    )


def _entry_point(root: Path, loaded: LoadedArtefact, plan: KernelPlan, arch: str) -> EntryPoint:
    view = view_of_graph(loaded.graph)
    return EntryPoint(
        arch=arch,
        object_path=root / "kernels.o",
        main=str(plan.main),
        # the runtime's arena, slack included, byte for byte
        arena_bytes=int(loaded.memory.arena_bytes) + ALIGNMENT,
        weights_path=root / "weights.bin",
        packed_path=root / "packed.bin",
        inputs=tuple(TensorSlot(o.name, o.dtype, tuple(o.shape)) for o in plan.inputs),
        outputs=tuple(
            TensorSlot(name, o.dtype, tuple(o.shape))
            for name, o in zip(view.outputs, plan.outputs, strict=True)
        ),
    )


def main_entry_point(artefact_dir: Path) -> EntryPoint | None:
    """The artefact's whole-graph entry (every partition generated code), else None."""
    root = Path(artefact_dir)
    loaded = load_artefact(root, native=False)
    codegen = loaded.manifest.get("codegen")
    if not codegen:
        return None
    plan = KernelPlan.from_dict(_read_json(root / "kernels.json"))
    return _entry_point(root, loaded, plan, _arch_of(codegen)) if plan.main else None


def _read_json(path: Path) -> Any:
    return json.loads(path.read_text())


class _EmulatedNative:
    """The runtime's ``native`` program, whose partition entries run in the emulator.

    ``address(name)`` is the address of a C-callable thunk: the runtime calls it as it
    would call the mapped object, the thunk copies the arena to the shared file, has the
    emulated runner call the partition, and copies the arena back. An exception cannot
    cross the C frame, so the first one is kept and raised after the inference.
    """

    _PROTO = ctypes.CFUNCTYPE(None, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_void_p)
    _PROTO_PROF = ctypes.CFUNCTYPE(
        None, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_void_p
    )

    def __init__(self, plan: KernelPlan, packed: np.ndarray, server: PartitionServer,
                 shared: np.memmap) -> None:  # fmt: skip
        self.plan = plan
        self.packed = packed
        self.server = server
        self.shared = shared
        self.error: BaseException | None = None
        self._thunks: dict[str, CFuncPtr] = {}  # kept alive while the code may call them

    def _call(self, symbol: str, arena_ptr: int) -> None:
        if self.error is not None:
            return
        n = self.shared.size
        try:
            ctypes.memmove(self.shared.ctypes.data, arena_ptr, n)
            self.shared.flush()
            self.server.call(symbol)
            ctypes.memmove(arena_ptr, self.shared.ctypes.data, n)
        except BaseException as exc:  # noqa: BLE001 - re-raised by the session after the run
            self.error = exc

    def address(self, name: str) -> int:
        if name not in self._thunks:
            if name.endswith("_prof"):
                base = name[: -len("_prof")]
                thunk = self._PROTO_PROF(lambda a, _w, _p, _c, s=base: self._call(s, a))
            else:
                thunk = self._PROTO(lambda a, _w, _p, s=name: self._call(s, a))
            self._thunks[name] = thunk
        return int(ctypes.cast(self._thunks[name], ctypes.c_void_p).value or 0)


class MixedEmulatedSession:
    """An artefact with host partitions: the runtime runs, native partitions emulated."""

    latency_status = "emulated"

    def __init__(self, loaded: LoadedArtefact, plan: KernelPlan, meta: ArtefactSession,
                 arch: str, *, what: str,
                 timeout_s: float = DEFAULT_TIMEOUT_S, threads: int = 1) -> None:  # fmt: skip
        root = Path(loaded.path)
        self.what = what
        self.arch = arch
        self.emulator = toolchain(arch).emulator
        self._meta = meta
        parts = [p.entry for p in plan.partitions]
        runner = build_runner(root / "kernels.o", arch, parts=parts, what=what)
        self._dir = tempfile.TemporaryDirectory(prefix="guard-arena-")
        arena_file = Path(self._dir.name) / "arena.bin"

        size = int(loaded.memory.arena_bytes) + ALIGNMENT  # the runtime's arena, byte for byte
        arena_file.write_bytes(bytes(size))
        shared = np.memmap(arena_file, dtype=np.uint8, mode="r+", shape=(size,))
        server = PartitionServer(
            runner, arch, arena_file=arena_file, weights=root / "weights.bin",
            packed=root / "packed.bin", what=what, timeout_s=timeout_s, threads=threads,
        )  # fmt: skip
        packed = np.fromfile(root / "packed.bin", np.uint8)
        self._native = _EmulatedNative(plan, packed, server, shared)
        self._runtime = dataclasses.replace(loaded, native=self._native).runtime()
        self.input_names = list(self._runtime.input_names)
        self.output_names = list(self._runtime.output_names)
        self._finalizer = weakref.finalize(self, _close, server, self._dir)

    @property
    def latency_reason(self) -> str:
        return f"skipped: emulated ({self.emulator}): {self.arch} code is not timed on this host"

    def run(self, feeds: dict[str, np.ndarray]) -> list[np.ndarray]:
        out = self._runtime.run(feeds)
        if self._native.error is not None:
            error, self._native.error = self._native.error, None
            raise error
        return [out[o] for o in self.output_names]

    def run_many(self, feeds: Sequence[dict[str, np.ndarray]]) -> list[list[np.ndarray]]:
        return [self.run(f) for f in feeds]

    def partitions(self) -> PartitionInfo:
        result: PartitionInfo = self._meta.partitions()
        return result

    def memory(self) -> MemoryInfo:
        result: MemoryInfo = self._meta.memory()
        return result

    def close(self) -> None:
        self._finalizer()


def _close(server: PartitionServer, directory: tempfile.TemporaryDirectory[str]) -> None:
    server.close()
    directory.cleanup()
