"""Content-addressed artefact directories and manifest.json on disk.

An artefact lives in ``<root>/<model>/<backend>/<key>/`` with its payload and
manifest.json. The key is the manifest's pinned hash plus a hash of the backend options,
so a rebuild with nothing pinned changed lands in the same directory and is reused, and
any pin change (a runtime bump, another target) gets a new one side by side.

A manifest on disk is trusted only if it still hashes to its own ``sha256``: a hand-edited
or truncated manifest is refused, naming the file, rather than silently reused.
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from guard.errors import UsageError
from guard.fsutil import BoundedReadError, atomic_write_text, read_bounded_text
from guard.manifest.pins import REQUIRED, SCHEMA_VERSION, canonical_json, manifest_sha256

_SAFE = re.compile(r"[^A-Za-z0-9._-]")


class ManifestError(UsageError):
    """A manifest file cannot be used; the message names the file and what to do."""


def artefact_key(manifest: Mapping[str, Any], options: Mapping[str, Any] | None = None) -> str:
    """``<first 16 hex of the manifest sha256>-<first 8 hex of the options hash>``.

    The manifest part is readable on its own: artefacts sharing it share every pin and
    differ only in backend options.
    """
    sha = manifest.get("sha256")
    if not isinstance(sha, str) or not re.fullmatch(r"[0-9a-f]{64}", sha):
        raise ValueError("artefact_key needs a manifest with its sha256 (build_manifest)")
    opts = hashlib.sha256(canonical_json(dict(options or {}))).hexdigest()
    return f"{sha[:16]}-{opts[:8]}"


def _component(name: str, what: str) -> str:
    safe = _SAFE.sub("_", str(name))
    if not safe.strip("._"):
        raise UsageError(
            f"{what} name {name!r} cannot name a directory", hint="use letters, digits, . _ -."
        )
    return safe


def artefact_dir(root: Path, model: str, backend: str, key: str) -> Path:
    """``root/<model>/<backend>/<key>``, names made filesystem-safe (no separators, no ..)."""
    return (
        Path(root)
        / _component(model, "model")
        / _component(backend, "backend")
        / _component(key, "artefact key")
    )


def write_manifest(path: Path, m: Mapping[str, Any]) -> dict[str, Any]:
    """Write manifest.json atomically (temp file, fsync, rename), sealing its sha256.

    The sha256 is recomputed from the pinned fields, so a caller that filled in a pin after
    build_manifest (or updated tuning hits/misses, which are not pins) writes a manifest
    that loads. Returns the manifest as written.
    """
    path = Path(path)
    doc = json.loads(json.dumps(m, allow_nan=False))
    _validate_shape(doc, path)
    doc["sha256"] = manifest_sha256(doc)
    text = json.dumps(doc, indent=2, sort_keys=True, allow_nan=False) + "\n"
    path.parent.mkdir(parents=True, exist_ok=True)
    atomic_write_text(path, text)
    return doc


def _validate_shape(doc: Any, path: Path) -> None:
    rebuild = "delete the artefact directory and rebuild it."
    if not isinstance(doc, dict):
        raise ManifestError("manifest is not a JSON object", where=str(path), hint=rebuild)
    version = doc.get("schema_version")
    if version != SCHEMA_VERSION:
        raise ManifestError(
            f"schema_version {version!r} is not supported (this guard reads {SCHEMA_VERSION})",
            where=str(path),
            hint=rebuild,
        )
    for section, keys in REQUIRED.items():
        block = doc.get(section)
        if not isinstance(block, dict):
            raise ManifestError(f"missing section {section!r}", where=str(path), hint=rebuild)
        for k in keys:
            if k not in block:
                raise ManifestError(f"missing key {section}.{k}", where=str(path), hint=rebuild)


def load_manifest(path: Path) -> dict[str, Any]:
    """Read and validate a manifest.json; refuse one whose pins no longer hash to sha256."""
    path = Path(path)
    rebuild = "delete the artefact directory and rebuild it."
    try:
        text = read_bounded_text(path)  # a regular file under a size limit
    except BoundedReadError as exc:
        raise ManifestError(exc.reason, where=str(path), hint=rebuild) from None
    except UnicodeDecodeError:
        raise ManifestError("not UTF-8 text", where=str(path), hint=rebuild) from None
    except OSError as exc:
        raise ManifestError(
            f"cannot read manifest ({exc.strerror or exc})", where=str(path), hint=rebuild
        ) from None
    try:
        doc = json.loads(text)
    except json.JSONDecodeError as exc:
        raise ManifestError(
            f"not valid JSON (line {exc.lineno}: {exc.msg})", where=str(path), hint=rebuild
        ) from None
    _validate_shape(doc, path)
    recorded = doc.get("sha256")
    if not isinstance(recorded, str):
        raise ManifestError("missing key sha256", where=str(path), hint=rebuild)
    try:
        actual = manifest_sha256(doc)
    except (TypeError, ValueError) as exc:
        raise ManifestError(f"pinned fields cannot be hashed ({exc})", where=str(path)) from None
    if actual != recorded:
        raise ManifestError(
            f"sha256 {recorded[:16]}... does not match its pinned fields ({actual[:16]}...): "
            "the manifest was edited or corrupted, so the artefact cannot be trusted",
            where=str(path),
            hint=rebuild,
        )
    return doc
