"""The dependency versions guard supports, and which installed ones fall outside them.

pyproject.toml declares guard's runtime dependencies as ranges so guard installs beside the
runtime a product ships (onnxruntime 1.22 stays 1.22); ``SUPPORTED`` repeats them (with the
tvm and openvino extras) so an installed guard can check its environment without its
pyproject, and tests/test_supported_versions.py keeps the two equal. Lower bounds are the
oldest versions guard's tests passed with (the README says how each was found); CI's
constraints/ci.txt pins today's exact versions, and every manifest records the exact
versions a result ran with.

An installed version outside its range is not refused: ``guard run`` prints one warning
line naming the range, writes its results as usual and marks them
(``unsupported_versions`` in the results file).
"""

from __future__ import annotations

from importlib import metadata
from typing import TypedDict

from packaging.requirements import Requirement
from packaging.version import InvalidVersion, Version

# Requirement strings, exactly as in pyproject.toml (dependencies, then the extras).
SUPPORTED: tuple[str, ...] = (
    "onnx>=1.23.2,<2",
    "onnxruntime>=1.19.2,<2",
    "llvmlite>=0.50.0,<0.51",
    "numpy>=2.0.2,<3",
    "scipy>=1.17.1,<2",
    "scikit-learn>=1.9.1,<2",
    "mlflow>=3.16.0,<4",
    "pandas>=3.1.1,<4",
    "pyyaml>=6.0.3,<7",
    "rich>=15.0.0",
    "pytest-benchmark>=5.3.1,<6",
    "ruptures>=1.1.10,<2",
    "threadpoolctl>=3.8.0",
    "plotly>=7.1.0,<8",
    "jinja2>=3.1.6,<4",
    "psycopg[binary]>=3.3.9,<4",
    "packaging>=24",
)
EXTRAS: dict[str, tuple[str, ...]] = {
    "tvm": (
        "apache-tvm>=0.27.0.post1,<0.28",
        # apache-tvm only bounds this below; 0.1.15.x segfaults in tvm.ir.save_json of TIR
        # nodes (MetaSchedule cannot write a tuning database). 0.1.14.post1 works.
        "apache-tvm-ffi>=0.1.14.post1,<0.1.15",
    ),
    "openvino": ("openvino>=2026.3.0,<2027",),
}


def requirements() -> list[Requirement]:
    """Every supported range: the dependencies, then each extra's."""
    return [Requirement(r) for r in (*SUPPORTED, *(r for rs in EXTRAS.values() for r in rs))]


def lowest(package: str) -> str:
    """The lower bound of ``package``'s supported range (``onnxruntime`` -> ``1.19.2``)."""
    for req in requirements():
        if req.name == package:
            return next(s.version for s in req.specifier if s.operator == ">=")
    raise KeyError(package)


class OutsideRange(TypedDict):
    """An installed package outside its supported range (the results' ``unsupported_versions``)."""

    package: str
    version: str
    supported: str  # the range pyproject declares, e.g. ">=1.19.2,<1.24"


def outside_range(
    installed: dict[str, str] | None = None,
) -> list[OutsideRange]:
    """``[{package, version, supported}]`` for each installed package outside its range.

    ``installed`` maps package names to versions (default: this environment's); a package
    that is not installed is not reported (a missing extra is said where it is used)."""
    out: list[OutsideRange] = []
    for req in requirements():
        if installed is not None:
            found = installed.get(req.name)
        else:
            try:
                found = metadata.version(req.name)
            except metadata.PackageNotFoundError:
                found = None
        if found is None:
            continue
        try:
            ok = req.specifier.contains(Version(found), prereleases=True)
        except InvalidVersion:
            ok = False
        if not ok:
            out.append({"package": req.name, "version": found, "supported": str(req.specifier)})
    return out


def warning_line(outside: list[OutsideRange]) -> str:
    """One line naming every package outside its supported range, and the range."""
    each = ", ".join(
        f"{o['package']} {o['version']} (supported: {o['supported']})" for o in outside
    )
    return (
        f"warning: outside guard's supported versions: {each}; results are written and "
        "marked (unsupported_versions)"
    )
