"""What a loaded suite is: the suite, one entry per (model, target), how to fill inputs.

These are the values the rest of guard reads; guard.suite.resolve builds them from a
validated file, with the defaults already applied.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from guard.core.json_types import JsonObject
from guard.suite.check_blocks import CheckBlocks
from guard.suite.limits import Limits, default_limits
from guard.suite.quantize import QuantizeSpec

ARCHES = ("x86_64", "aarch64")
DISTS = ("normal", "uniform", "zeros", "ones", "const")
DEFAULT_BUILD_TIMEOUT_S = 3600.0  # per model and backend; generous: a TVM build takes minutes

DEFAULT_MEASURE: dict[str, float] = {
    "warmup_s": 0.5,
    "min_iters": 20,
    "min_time_s": 1.0,
    "max_time_s": 20.0,
}


@dataclass(frozen=True)
class InputSpec:
    """How to bind and fill one graph input."""

    name: str
    shape: tuple[int, ...] | None
    dist: str = "normal"
    seed: int = 0
    params: dict[str, float] = field(default_factory=dict)  # mean/std, low/high, value
    file: str | None = None  # absolute path of a .npy/.npz/.pb the data comes from
    key: str | None = None  # the array of an .npz (default: the input's name)


@dataclass(frozen=True)
class ModelEntry:
    """One model of the suite for one target, with defaults already applied."""

    name: str
    source: str  # "zoo:<name>" or an absolute path to an .onnx file
    inputs: dict[str, InputSpec]
    backends: tuple[str, ...]
    target: str
    threads: int
    measure: dict[str, float]
    checks: CheckBlocks
    profile: str | None = None
    options: dict[str, JsonObject] = field(default_factory=dict)  # per backend, the user's
    build_timeout_s: float = DEFAULT_BUILD_TIMEOUT_S
    where: str = ""  # "suite.yaml: models[2]" for error messages
    suite_dir: Path = Path(".")  # relative paths in options resolve against it
    limits: Limits = field(default_factory=default_limits)  # guard.suite.limits
    expected: tuple[str, ...] = ()  # output_K.pb of a test_data directory: a second golden
    # The int8 entry a quantize: block adds (guard.suite.quantize): its model is built from
    # the fp32 source; None for every other entry.
    quantize: QuantizeSpec | None = None


@dataclass(frozen=True)
class Suite:
    name: str
    path: Path
    sha256: str
    models: tuple[ModelEntry, ...]
    description: str = ""

    @property
    def directory(self) -> Path:
        return self.path.parent


def latency_bound(value: float | dict[str, float] | None, arch: str) -> float | None:
    """Resolve a per-arch latency bound (``{x86_64: 150, aarch64: 300}``) for ``arch``."""
    if value is None or isinstance(value, float | int):
        return value
    return value.get(arch)
