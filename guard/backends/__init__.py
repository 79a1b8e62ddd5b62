"""Backend registry: an explicit dict, heavy backends imported lazily when asked for."""

from __future__ import annotations

import importlib
import importlib.util

from guard.backends.base import Backend
from guard.core.errors import UsageError

# name -> "module:factory"; imported only when the suite asks for the backend.
REGISTRY: dict[str, str] = {
    "onnxruntime": "guard.backends.onnxruntime:OnnxRuntimeBackend",
    "bundled": "guard.backends.bundled:BundledBackend",
    "tvm": "guard.backends.tvm:TvmBackend",
    "openvino": "guard.backends.openvino:OpenVinoBackend",
}
# Backends that need an optional dependency: name -> (the module it imports, the extra).
EXTRAS: dict[str, tuple[str, str]] = {
    "tvm": ("tvm", "tvm"),
    "openvino": ("openvino", "openvino"),
}


def get_backend(name: str) -> Backend:
    """Instantiate the backend called ``name``; unknown names are a usage error."""
    if name not in REGISTRY:
        raise UsageError(
            f"unknown backend {name!r}", hint=f"Use one of: {', '.join(sorted(REGISTRY))}."
        )
    if name in EXTRAS:
        needed, extra = EXTRAS[name]
        if importlib.util.find_spec(needed) is None:
            raise UsageError(
                f"backend {name!r} needs the {needed} package, which is not installed here",
                hint=f"Install it: pip install 'guard[{extra}]'.",
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
