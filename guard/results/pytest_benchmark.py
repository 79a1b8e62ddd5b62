"""pytest-benchmark JSON files read as guard results documents.

``pytest --benchmark-json FILE`` and the runs ``--benchmark-autosave`` keeps under
``.benchmarks/<machine>/NNNN_*.json`` are one object: ``machine_info``, ``commit_info``,
``benchmarks`` (each with ``name``, ``fullname``, ``params``, ``options`` and ``stats``),
``datetime`` and ``version`` (pytest-benchmark's own). A file is recognised by that shape,
never by its name; ``version`` must be of a release whose format guard knows (3.x-5.x), and
anything else is exit 2 naming the file and what was expected.

Each benchmark becomes one result of a suite named after the file's project and machine
(``pytest-benchmark.<project>.<node>``): model = the benchmark's full name, backend =
``pytest-benchmark``, target ``host``; the manifest pins pytest-benchmark's version and
timer options (compiler), the Python (runtime) and the machine (host: arch, CPU), so a
Python or option change shows in the manifest diff and another machine is refused as a
baseline, as for models.

Rounds. guard judges latency on rounds, independent units, never on the iterations of one
process. pytest-benchmark measures in one process; with ``--benchmark-save-data`` it keeps
every round's time per iteration (``stats.data``), and guard cuts them, in order, into
``ROUNDS`` consecutive blocks, each block one round of the result. A round's figure is the
block's 10th percentile, not its median (``ROUND_QUANTILE``; the round's ``figure`` says
so): a pytest-benchmark file records neither CPU time nor contention, which guard's own
runs use to see past a co-tenant, and a call that waits for a core only ever gains time, so
the fast end of a block is what the code costs. On the shared 2-vCPU machine (load 18-22),
one benchmark's median moved 2.0 -> 30 ms between two runs while its block 10th percentiles
stayed within 1%. A disturbance can also slow a whole block (a regex benchmark's blocks
ranged 4.4-44 ms in one run, 4.3-4.7 in the next): a block whose figure is more than
``CONTENDED_PCT`` above the file's fastest block is left out of the rounds (counted in
``measurement.contended_blocks``; its samples stay), so the comparison sees the blocks that
ran at the code's own speed, on both sides alike. The blocks share one process, so the offset
from one process to the next is not in their spread: it is the comparison's run-noise
allowance (``--run-noise-pct``, default 1.5% per side), as for a guard run. Without ``stats.data`` a benchmark has only
pytest-benchmark's summary (median, IQR, mean): its latency is reported, it gets no verdict
(``inconclusive``, saying to re-run with ``--benchmark-save-data``).
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any, NotRequired, TypedDict

import numpy as np

from guard.core.errors import UsageError
from guard.core.fsutil import read_bounded_text
from guard.core.json_types import Json

if TYPE_CHECKING:
    from guard.manifest.written import TuningCachePins

BACKEND = "pytest-benchmark"
ROUNDS = 10
ROUND_QUANTILE = 10.0  # a round's figure: this percentile of its block (module docstring)
# A block whose figure is this much above the file's fastest block was slowed by something
# else on the machine (module docstring): it is kept in samples_ms, not as a round.
CONTENDED_PCT = 10.0
KNOWN_MAJORS = (3, 4, 5)  # the JSON layout is the same from 3.0 through 5.x
_EXPECTED = (
    "a pytest-benchmark JSON file (pytest --benchmark-json FILE, or an autosaved run under "
    ".benchmarks/): an object with machine_info, commit_info, benchmarks and version"
)
NO_DATA = (
    "pytest-benchmark kept no raw samples for it (stats.data is written only with "
    "--benchmark-save-data): its summary has no rounds to judge; re-run with "
    "--benchmark-save-data"
)


# What a pytest-benchmark file becomes: guard's results document, one result per benchmark.


class BenchLatency(TypedDict):
    """``latency_ms`` of a benchmark's samples (no p90/p99 from a summary alone)."""

    min: float
    p50: float
    p90: NotRequired[float]
    p99: NotRequired[float]
    mean: float
    stdev: float
    n: int


class BenchRound(TypedDict):
    """A block of consecutive samples, read as a round (module docstring)."""

    p50: float
    figure: str
    median: float
    n: int
    samples_ms: list[float]


class BenchMeasurement(TypedDict, total=False):
    rounds: int
    round_isolation: str
    round_figure: str
    contended_blocks: int
    iterations: Json
    why_no_rounds: str


class BenchComponent(TypedDict):
    name: str
    version: Json
    options: NotRequired[Json]


class BenchModel(TypedDict):
    sha256: None
    opset: None
    inputs: Json  # the benchmark's params


class BenchHost(TypedDict):
    arch: Json
    cpu: Json
    threads: None


class BenchManifest(TypedDict):
    """The manifest of a benchmark: pytest-benchmark and Python as compiler and runtime,
    the machine pytest-benchmark recorded as host and driver."""

    schema_version: int
    compiler: BenchComponent
    runtime: BenchComponent
    driver: dict[str, Json]  # {system, release}
    target: dict[str, str]  # {raw, canonical}: host
    tuning_cache: TuningCachePins
    model: BenchModel
    host: BenchHost
    guard: dict[str, Json]  # empty: no guard built it
    sha256: NotRequired[str]


class BenchResult(TypedDict):
    model: str
    backend: str
    target: str
    verdict: str
    checks: list[Json]
    manifest: BenchManifest
    latency_status: str
    extra_info: Json
    group: Json
    latency_ms: NotRequired[BenchLatency]
    samples_ms: NotRequired[list[float]]
    rounds: NotRequired[list[BenchRound]]
    measurement: NotRequired[BenchMeasurement]


class BenchGit(TypedDict):
    commit: Json
    dirty: bool
    branch: Json


class BenchSource(TypedDict):
    format: str
    version: str
    path: str


class BenchDocument(TypedDict):
    """The results document of a pytest-benchmark file."""

    schema_version: int
    suite: str
    suite_path: str
    started: Json
    git: BenchGit
    source: BenchSource
    results: list[BenchResult]


def looks_like(doc: Any) -> bool:
    """A pytest-benchmark document, by shape (guard's results carry ``results`` instead)."""
    return isinstance(doc, Mapping) and "benchmarks" in doc and "results" not in doc


def _bad(path: Path, why: str) -> UsageError:
    return UsageError(f"{why}; expected {_EXPECTED}", where=str(path))


def _version(doc: Mapping[str, Json], path: Path) -> str:
    v = doc.get("version")
    m = re.match(r"^(\d+)\.\d+", v) if isinstance(v, str) else None
    if m is None:
        raise _bad(path, f"no pytest-benchmark version (version: {v!r})")
    if int(m.group(1)) not in KNOWN_MAJORS:
        raise UsageError(
            f"pytest-benchmark version {v} is not one guard reads (it knows the files of "
            f"{KNOWN_MAJORS[0]}.x-{KNOWN_MAJORS[-1]}.x)",
            where=str(path),
            hint="Write the file with a pytest-benchmark guard knows, or upgrade guard.",
        )
    return str(v)


def _name(text: Any) -> str:
    return re.sub(r"[^A-Za-z0-9_.\-]+", "-", str(text or "unknown")).strip("-.") or "unknown"


def suite_name(doc: Mapping[str, Json]) -> str:
    """``pytest-benchmark.<project>.<machine node>``: one MLflow suite per project and machine."""
    project = (doc.get("commit_info") or {}).get("project")
    node = (doc.get("machine_info") or {}).get("node")
    return f"pytest-benchmark.{_name(project)}.{_name(node)}"


def _latency(ms: np.ndarray) -> BenchLatency:
    return {
        "min": float(ms.min()),
        "p50": float(np.median(ms)),
        "p90": float(np.percentile(ms, 90)),
        "p99": float(np.percentile(ms, 99)),
        "mean": float(ms.mean()),
        "stdev": float(ms.std(ddof=1)) if ms.size > 1 else 0.0,
        "n": int(ms.size),
    }


def _rounds(ms: np.ndarray) -> tuple[list[BenchRound], int]:
    """(rounds, blocks left out): ``ROUNDS`` consecutive blocks (fewer when there are fewer
    samples); each round's figure (``p50``, the key every comparison reads) is its block's
    ``ROUND_QUANTILE``th percentile, and ``figure`` says so. Blocks more than
    ``CONTENDED_PCT`` above the fastest one are left out (module docstring)."""
    blocks = np.array_split(ms, min(ROUNDS, ms.size))
    figures = [float(np.percentile(b, ROUND_QUANTILE)) for b in blocks]
    ceiling = min(figures) * (1.0 + CONTENDED_PCT / 100.0)
    figure = f"p{ROUND_QUANTILE:g} of the block"
    rounds: list[BenchRound] = [
        {
            "p50": f,
            "figure": figure,
            "median": float(np.median(b)),
            "n": int(b.size),
            "samples_ms": b.tolist(),
        }
        for b, f in zip(blocks, figures, strict=True)
        if f <= ceiling
    ]
    return rounds, len(blocks) - len(rounds)


def _manifest(doc: Mapping[str, Json], bench: Mapping[str, Json], version: str) -> BenchManifest:
    from guard.manifest.pins import manifest_sha256, tuning_cache_record

    machine = doc.get("machine_info") or {}
    cpu = machine.get("cpu") or {}
    m: BenchManifest = {
        "schema_version": 1,
        "compiler": {"name": BACKEND, "version": version, "options": bench.get("options") or {}},
        "runtime": {
            "name": machine.get("python_implementation") or "python",
            "version": machine.get("python_version"),
        },
        "driver": {"system": machine.get("system"), "release": machine.get("release")},
        "target": {"raw": "host", "canonical": "host"},
        "tuning_cache": tuning_cache_record(None),
        "model": {"sha256": None, "opset": None, "inputs": bench.get("params") or {}},
        "host": {
            "arch": machine.get("machine"),
            "cpu": cpu.get("brand_raw") or machine.get("processor"),
            "threads": None,
        },
        "guard": {},
    }
    m["sha256"] = manifest_sha256(m)
    return m


def _result(doc: Mapping[str, Json], bench: Json, version: str, path: Path, i: int) -> BenchResult:
    at = f"benchmarks[{i}]"
    if not isinstance(bench, Mapping) or not isinstance(bench.get("stats"), Mapping):
        raise _bad(path, f"{at} has no stats")
    stats = bench["stats"]
    name = bench.get("fullname") or bench.get("name")
    if not isinstance(name, str) or not name:
        raise _bad(path, f"{at} has no name")
    data = stats.get("data")
    result: BenchResult = {
        "model": name,
        "backend": BACKEND,
        "target": "host",
        "verdict": "pass",
        "checks": [],
        "manifest": _manifest(doc, bench, version),
        "latency_status": "measured",
        "extra_info": bench.get("extra_info") or {},
        "group": bench.get("group"),
    }
    if isinstance(data, list) and data:
        try:
            ms = np.asarray(data, dtype=float) * 1e3
        except (TypeError, ValueError):
            raise _bad(path, f"{at}.stats.data holds something that is not a time") from None
        if not np.all(np.isfinite(ms)) or np.any(ms <= 0):
            raise _bad(path, f"{at}.stats.data holds a time that is not positive and finite")
        rounds, contended = _rounds(ms)
        result["latency_ms"] = _latency(ms)
        result["samples_ms"] = ms.tolist()
        result["rounds"] = rounds
        result["measurement"] = {
            "rounds": len(rounds),
            "round_isolation": "blocks of one process's pytest-benchmark rounds",
            "round_figure": f"p{ROUND_QUANTILE:g} of each block",
            "contended_blocks": contended,
            "iterations": stats.get("iterations"),
        }
        return result
    try:
        median, n = float(stats["median"]) * 1e3, int(stats["rounds"])
    except (KeyError, TypeError, ValueError):
        raise _bad(path, f"{at}.stats has neither data nor a median and rounds") from None
    result["latency_ms"] = {
        "min": float(stats.get("min", median / 1e3)) * 1e3,
        "p50": median,
        "mean": float(stats.get("mean", median / 1e3)) * 1e3,
        "stdev": float(stats.get("stddev", 0.0)) * 1e3,
        "n": n,
    }
    result["measurement"] = {"why_no_rounds": NO_DATA}
    return result


def from_document(doc: Mapping[str, Json], path: Path) -> BenchDocument:
    """The guard results document of a parsed pytest-benchmark file (see the module doc)."""
    if not isinstance(doc.get("machine_info"), Mapping) or not isinstance(
        doc.get("benchmarks"), list
    ):
        raise _bad(path, "machine_info or benchmarks is missing or of the wrong type")
    version = _version(doc, path)
    commit = doc.get("commit_info") or {}
    results = [_result(doc, b, version, path, i) for i, b in enumerate(doc["benchmarks"])]
    seen: set[str] = set()
    for r in results:
        if r["model"] in seen:
            raise _bad(path, f"benchmark {r['model']!r} appears twice")
        seen.add(r["model"])
    return {
        "schema_version": 1,
        "suite": suite_name(doc),
        "suite_path": str(path),
        "started": doc.get("datetime"),
        "git": {
            "commit": commit.get("id"),
            "dirty": bool(commit.get("dirty")),
            "branch": commit.get("branch"),
        },
        "source": {"format": BACKEND, "version": version, "path": str(path)},
        "results": results,
    }


def read(path: Path) -> BenchDocument | None:
    """The guard results document of a pytest-benchmark file, or None when the file is
    JSON of another shape (a guard results file: the caller reads it as one)."""
    try:
        doc = json.loads(read_bounded_text(path))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError):
        return None  # the caller's reader says what is wrong with it
    if not looks_like(doc):
        return None
    from guard.results.load import validate_results

    out = from_document(doc, Path(path))
    validate_results(out, str(path), require_suite=True)
    return out
