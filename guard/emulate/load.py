"""Load an artefact for this host: natively when it can run here, else under emulation.

``load_session`` is what ``guard run`` (guard.run.one_result) calls instead of ``backend.load``: the
canonical target's triple decides. Only a backend that builds code for a target (bundled)
can be run under emulation; any other backend asked for a foreign architecture is refused
with one line saying what to do.
"""

from __future__ import annotations

import importlib
from pathlib import Path

from guard.backends.base import Backend, Session
from guard.core.errors import UsageError
from guard.emulate.tools import host_arch, needs_emulation, toolchain
from guard.manifest.target_string import target_arch
from guard.results.manifest import Manifest

# backend name -> "module:function(artefact_dir, threads) -> Session" for a foreign arch.
EMULATED_LOADERS = {"bundled": "guard.emulate.bundled:load_emulated"}


def artefact_arch(manifest: Manifest) -> str:
    """The architecture the artefact's code is for (its canonical target's triple)."""
    return target_arch(str(manifest.target.canonical))


def load_session(backend: Backend, artefact: Path, threads: int, manifest: Manifest) -> Session:
    """A session over ``artefact``: the backend's own, or an emulated one for another arch."""
    arch = artefact_arch(manifest)
    if not needs_emulation(arch):
        return backend.load(artefact, threads)
    loader = EMULATED_LOADERS.get(backend.name)
    if loader is None:
        raise UsageError(
            f"backend {backend.name} cannot run {arch} code on this {host_arch()} host",
            hint=f"Only the bundled backend compiles for a target and verifies it under "
            f"{toolchain(arch).emulator}: list this target under a model that uses "
            f"backends: [bundled], or run it on an {arch} machine.",
        )
    module, _, func = loader.partition(":")
    session: Session = getattr(importlib.import_module(module), func)(artefact, threads)
    return session
