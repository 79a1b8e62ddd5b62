"""Real-weight models shipped inside installed Python packages (PyPI wheels).

Wheels such as rapidocr-onnxruntime, magika and silero-vad carry trained ONNX models in
their package data: real weights, real operator mixes, no download at run time. The test
extra installs some of them; tests and benchmarks find a model by package and file glob.
"""

from __future__ import annotations

import importlib.util
from pathlib import Path


def wheel_model(package: str, pattern: str) -> tuple[Path | None, str]:
    """(the last file matching ``pattern`` inside the installed ``package``, "") or
    (None, why not: the package is not installed, or holds no such file)."""
    spec = importlib.util.find_spec(package)
    if spec is None or not spec.submodule_search_locations:
        return None, f"the {package} wheel is not installed (pip install -e '.[test]')"
    found = sorted(Path(next(iter(spec.submodule_search_locations))).glob(pattern))
    if not found:
        return None, f"no {pattern} inside the installed {package} wheel"
    return found[-1], ""
