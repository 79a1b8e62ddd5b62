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
from typing import Any, cast

from guard.core.errors import SchemaError, UsageError
from guard.core.fsutil import atomic_write_text
from guard.core.json_types import Json
from guard.core.schema import Schema, read_json
from guard.manifest.pins import REQUIRED, SCHEMA_VERSION, canonical_json, manifest_sha256
from guard.manifest.written import ManifestJson

_SAFE = re.compile(r"[^A-Za-z0-9._-]")
_REBUILD = "delete the artefact directory and rebuild it."


class ManifestError(SchemaError):
    """A manifest file cannot be used; the message names the file and what to do."""


MANIFEST = Schema("manifest", SCHEMA_VERSION, _REBUILD, error=ManifestError)


def artefact_key(manifest: ManifestJson, options: Mapping[str, Json] | None = None) -> str:
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


def write_manifest(path: Path, m: ManifestJson) -> ManifestJson:
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


def _validate_shape(doc: Any, path: Path) -> ManifestJson:
    doc = MANIFEST.check(doc, path)
    at = MANIFEST.at(path)
    for section, keys in REQUIRED.items():
        if not isinstance(doc.get(section), dict):
            raise at.key(section).fail("missing (a section of every manifest)", _REBUILD)
        for k in keys:
            if k not in doc[section]:
                raise at.key(section).key(k).fail("missing (a pin of every manifest)", _REBUILD)
    return cast(ManifestJson, doc)  # every section and pin is there (the sha256 is checked apart)


def load_manifest(path: Path) -> ManifestJson:
    """Read and validate a manifest.json; refuse one whose pins no longer hash to sha256."""
    path = Path(path)
    doc = _validate_shape(
        read_json(path, what="manifest", hint=_REBUILD, error=ManifestError), path
    )
    recorded = doc.get("sha256")
    at = MANIFEST.at(path).key("sha256")
    if not isinstance(recorded, str):
        raise at.fail("missing (the hash that seals the manifest)", _REBUILD)
    try:
        actual = manifest_sha256(doc)
    except (TypeError, ValueError) as exc:
        raise MANIFEST.at(path).fail(f"pinned fields cannot be hashed ({exc})", _REBUILD) from None
    if actual != recorded:
        raise at.fail(
            f"{recorded[:16]}... does not match its pinned fields ({actual[:16]}...): "
            "the manifest was edited or corrupted, so the artefact cannot be trusted",
            _REBUILD,
        )
    return doc
