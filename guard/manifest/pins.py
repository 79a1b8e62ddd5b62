"""Building a manifest and hashing its pins.

Pinned fields (``PINNED_FIELDS``), the ones that decide whether two artefacts are
comparable and whether a built artefact can be reused:

- ``compiler``, ``runtime``: the whole dicts the backend reports ({name, version, ...});
  a backend that pins more (optimisation level, pipeline name) adds keys there.
- ``driver``: kernel release, CPU model, microcode, BLAS build, GPU driver/CUDA.
- ``target.canonical``: not ``target.raw``; two spellings of one target are one pin.
- ``tuning_cache.sha256``: the cache content. Its path is where it happens to live, and
  entries/hits/misses are observations of a build, not inputs to it.
- ``model.sha256``: the model file, and ``model.inputs``: the bound input shapes and
  dtypes (a dynamic model bound to another batch size is another artefact; the file hash
  alone does not see that). ``model.opset`` follows from the file and is not pinned twice.
- ``host.arch``, ``host.cpu``, ``host.threads``: what ran it. ``host.cores`` is not: the
  intra-op thread count is the pin; the core count is a fact about the box.
- ``quantization``, only in the manifest of an int8 model guard built (guard.run.int8):
  {source_sha256, profile_sha256, calibration_sha256, method}. A manifest without it hashes
  as before; a changed calibration set is a changed pin, seen in every manifest diff.

The guard version and git commit are recorded but not pinned: guard is the instrument,
not the thing measured. Pinning it would make every guard commit invalidate every
artefact and every baseline, so "did the dependency bump regress?" could never be
answered across a guard change. Where guard *is* the stack under test (the bundled
compiler), its backend pins its own version through ``compiler``.

``sha256`` is the SHA-256 of the canonical JSON (sorted keys, no whitespace, UTF-8) of
{dotted pinned field: value}.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from guard.core.fsutil import file_sha256
from guard.core.json_types import Json, JsonObject
from guard.manifest.capture import capture_driver, capture_guard, capture_host
from guard.manifest.target_string import canonicalize
from guard.manifest.written import (
    ComponentPins,
    DriverPins,
    GuardInfo,
    HostPins,
    ManifestJson,
    ManifestPins,
    QuantizationPins,
    TuningCachePins,
    TuningObservations,
)

SCHEMA_VERSION = 1

PINNED_FIELDS = (
    "compiler",
    "runtime",
    "driver",
    "target.canonical",
    "tuning_cache.sha256",
    "model.sha256",
    "model.inputs",
    "host.arch",
    "host.cpu",
    "host.threads",
)

# Pinned when present (an optional section): leaving it out keeps older hashes.
OPTIONAL_PINNED = ("quantization",)

TUNING_CACHE_KEYS = ("path", "sha256", "entries", "hits", "misses")
TUNING_CACHE_OPTIONAL_KEYS = ("tasks", "missed", "kernel_speedup")

# Every key a manifest has, section by section; loading refuses a manifest missing one.
REQUIRED = {
    "compiler": ("name", "version"),
    "runtime": ("name", "version"),
    "driver": ("kernel", "cpu", "microcode", "blas", "gpu"),
    "target": ("raw", "canonical"),
    "tuning_cache": TUNING_CACHE_KEYS,
    "model": ("sha256", "opset", "inputs"),
    "host": ("arch", "cpu", "cores", "threads"),
    "guard": ("version", "commit", "dirty"),
}


def canonical_json(obj: Any) -> bytes:
    """Sorted keys, no whitespace, UTF-8; NaN refused (it has no JSON spelling)."""
    return json.dumps(
        obj, sort_keys=True, separators=(",", ":"), ensure_ascii=False, allow_nan=False
    ).encode("utf-8")


_MISSING = object()


def _get(m: Mapping[str, Json], dotted: str) -> Json:
    cur: Any = m
    for part in dotted.split("."):
        if not isinstance(cur, Mapping) or part not in cur:
            return _MISSING
        cur = cur[part]
    return cur


def pinned(m: Mapping[str, Json]) -> JsonObject:
    """{dotted pinned field: value}; a missing field is a KeyError naming it. ``m`` is a
    manifest as built or as read before validation (write_manifest, load_manifest)."""
    out: JsonObject = {}
    for f in PINNED_FIELDS:
        v = _get(m, f)
        if v is _MISSING:
            raise KeyError(f)
        out[f] = v
    for f in OPTIONAL_PINNED:
        v = _get(m, f)
        if v is not _MISSING:
            out[f] = v
    return out


def is_pinned(field: str) -> bool:
    """Whether a dotted field (or a field inside a pinned dict) is a pin."""
    return any(field == p or field.startswith(p + ".") for p in (*PINNED_FIELDS, *OPTIONAL_PINNED))


def manifest_sha256(m: Mapping[str, Json]) -> str:
    """SHA-256 over the pinned fields' canonical JSON."""
    return hashlib.sha256(canonical_json(pinned(m))).hexdigest()


def _copy(obj: Any) -> Any:
    """A deep, plain-JSON copy: tuples become lists, so the hash is what the file holds,
    and a cached capture cannot be mutated through a manifest."""
    return json.loads(canonical_json(obj))


def tuning_cache_record(tc: TuningObservations | None) -> TuningCachePins:
    """The manifest's tuning_cache block: every key present, explicit nulls when absent
    (TUNING_CACHE_KEYS, then those of TUNING_CACHE_OPTIONAL_KEYS present)."""
    tc = tc or {}
    path = tc.get("path")
    out: TuningCachePins = {
        "path": None if path is None else str(path),
        "sha256": tc.get("sha256"),
        "entries": tc.get("entries"),
        "hits": tc.get("hits"),
        "misses": tc.get("misses"),
    }
    # Observations some backends add (the bundled cache's missed keys with their nearest
    # key and how it differs, its task count): kept when present, never pinned.
    if tc.get("tasks") is not None:
        out["tasks"] = _copy(tc["tasks"])
    if tc.get("missed") is not None:
        out["missed"] = _copy(tc["missed"])
    if tc.get("kernel_speedup") is not None:
        out["kernel_speedup"] = _copy(tc["kernel_speedup"])
    return out


def build_manifest(
    *,
    compiler: ComponentPins,
    runtime: ComponentPins,
    target_raw: str,
    threads: int,
    model_path: Path | str,
    model_opset: int | None,
    model_inputs: Mapping[str, Json],
    tuning_cache: TuningObservations | None,
    root: Path = Path("/"),
    driver: DriverPins | None = None,
    host: HostPins | None = None,
    guard_info: GuardInfo | None = None,
    model_sha256: str | None = None,
    quantization: QuantizationPins | None = None,
) -> ManifestJson:
    """A manifest (schema_version 1) for one (model, backend, target), sha256 included.

    ``driver``, ``host`` and ``guard_info`` default to this machine's captures; they are
    parameters so tests (and tools rebuilding a manifest elsewhere) can supply them.
    ``model_sha256``, when the caller already hashed the model file, saves hashing it
    again (hundreds of MB for the larger zoo models).
    ``tuning_cache`` is {"path", "sha256", "entries", "hits", "misses"} or None.
    ``quantization``: an int8 model's pins (guard.run.int8.int8_pins), or None.
    """
    m: ManifestPins = {
        "schema_version": SCHEMA_VERSION,
        "compiler": _copy(compiler),
        "runtime": _copy(runtime),
        "driver": _copy(driver if driver is not None else capture_driver(root)),
        "target": {"raw": target_raw, "canonical": canonicalize(target_raw, root=root)},
        "tuning_cache": tuning_cache_record(tuning_cache),
        "model": {
            "sha256": model_sha256 or file_sha256(Path(model_path)),
            "opset": model_opset,
            "inputs": _copy(model_inputs),
        },
        "host": _copy(host if host is not None else capture_host(threads, root)),
        "guard": _copy(guard_info if guard_info is not None else capture_guard()),
    }
    if quantization:
        m["quantization"] = _copy(quantization)
    return {**m, "sha256": manifest_sha256(m)}
