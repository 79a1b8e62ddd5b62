"""Backend registry: an explicit dict, heavy backends imported lazily when asked for."""

from __future__ import annotations

import importlib

from guard.backends.base import Backend
from guard.core.errors import UsageError

# name -> "module:factory"; imported only when the suite asks for the backend.
REGISTRY: dict[str, str] = {
    "onnxruntime": "guard.backends.onnxruntime:OnnxRuntimeBackend",
    "bundled": "guard.backends.bundled:BundledBackend",
    "tvm": "guard.backends.tvm:TvmBackend",
}


def get_backend(name: str) -> Backend:
    """Instantiate the backend called ``name``; unknown names are a usage error."""
    if name not in REGISTRY:
        raise UsageError(
            f"unknown backend {name!r}", hint=f"Use one of: {', '.join(sorted(REGISTRY))}."
        )
    module_name, _, factory = REGISTRY[name].partition(":")
    try:
        module = importlib.import_module(module_name)
    except ImportError as exc:  # pragma: no cover - depends on the install
        raise UsageError(
            f"backend {name!r} is not available: {exc}",
            hint="Reinstall guard with its pinned dependencies (pip install -e .).",
        ) from exc
    return getattr(module, factory)()
