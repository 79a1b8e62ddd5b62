"""The ``bundled`` backend: guard's own compiler (guard/compiler) behind the Backend protocol.

Build = import → optimise (pipeline O0/O1/O2) → partition (native backend or a delegate
profile, with the reference interpreter as fallback) → schedule → plan one arena → write a
self-contained artefact (guard.compiler.artefact: IR text, flat weights + index, partition
report, frozen memory plan, hashes; no pickle). Load = verify every hash, then run the
partitions in schedule order over one preallocated arena (guard.compiler.runtime).

This file is only the adapter; the artefact layout lives in guard/compiler/artefact.py.
"""

from __future__ import annotations

import contextlib
from pathlib import Path
from typing import Any

import numpy as np

from guard.backends.base import BuildInfo, BuildRequest, MemoryInfo, PartitionInfo


class _NoLimit:
    def limit(self, **_: Any) -> contextlib.nullcontext[None]:
        return contextlib.nullcontext()


def _blas_controller() -> Any:
    # threadpoolctl arrives with scikit-learn (pinned); without it BLAS runs unlimited.
    try:
        from threadpoolctl import ThreadpoolController
    except ImportError:  # pragma: no cover - depends on the install
        return _NoLimit()
    return ThreadpoolController()


class BundledSession:
    """A loaded bundled artefact; numpy's BLAS pool limited to the suite's threads."""

    def __init__(self, artefact_dir: Path, threads: int) -> None:
        from guard.compiler.artefact import ArtefactSession

        self._session = ArtefactSession(artefact_dir)
        self.threads = threads
        self._blas = _blas_controller()
        self.input_names = list(self._session.input_names)
        self.output_names = list(self._session.output_names)

    def run(self, feeds: dict[str, np.ndarray]) -> list[np.ndarray]:
        # An oversubscribed OpenBLAS on a busy machine is 10-70x slower, which would
        # measure the OS scheduler, not the model.
        with self._blas.limit(limits=self.threads, user_api="blas"):
            return self._session.run(feeds)

    def partitions(self) -> PartitionInfo:
        return self._session.partitions()

    def memory(self) -> MemoryInfo:
        return self._session.memory()


class BundledBackend:
    name = "bundled"

    def versions(self) -> tuple[dict[str, Any], dict[str, Any]]:
        from guard.compiler.artefact import compiler_version, runtime_pins
        from guard.compiler.runtime import COMPILER_NAME

        return {"name": COMPILER_NAME, "version": compiler_version()}, runtime_pins()

    def build(self, req: BuildRequest) -> BuildInfo:
        from guard.compiler.artefact import build_bundled

        return build_bundled(req)

    def load(self, artefact_dir: Path, threads: int) -> BundledSession:
        return BundledSession(Path(artefact_dir), threads)
