"""guard.manifest: the pins that make two artefacts comparable, and their hash.

- target: canonical target strings (``canonicalize``, ``parse_target``, ``target_arch``)
- cpu: this machine's CPU (``host_cpu``) and the CPU and feature names LLVM knows
- capture: driver, host and guard facts of this machine
- pins: ``build_manifest``, the pinned-field list and the sha256 over it
- store: content-addressed artefact directories, atomic write, verified load
- diff: field-by-field differences, pinned first
- written: the manifest as guard writes it, one TypedDict per section
"""

from guard.manifest.capture import capture_driver, capture_guard, capture_host
from guard.manifest.diff import diff_manifests, format_diff
from guard.manifest.pins import (
    PINNED_FIELDS,
    SCHEMA_VERSION,
    build_manifest,
    canonical_json,
    is_pinned,
    manifest_sha256,
)
from guard.manifest.store import (
    ManifestError,
    artefact_dir,
    artefact_key,
    load_manifest,
    write_manifest,
)
from guard.manifest.target_string import TargetError, canonicalize, parse_target, target_arch

__all__ = [
    "PINNED_FIELDS",
    "SCHEMA_VERSION",
    "ManifestError",
    "TargetError",
    "artefact_dir",
    "artefact_key",
    "build_manifest",
    "canonical_json",
    "canonicalize",
    "capture_driver",
    "capture_guard",
    "capture_host",
    "diff_manifests",
    "format_diff",
    "is_pinned",
    "load_manifest",
    "manifest_sha256",
    "parse_target",
    "target_arch",
    "write_manifest",
]
