"""Artefact build and cache: one content-addressed, pinned artefact per model and backend.

``build_artefact`` keys the artefact directory by the manifest's pinned hash plus the
backend options; when nothing pinned changed, the previous build is reused. A build happens
in a private temporary directory renamed into place, so a failed or killed build leaves no
half artefact behind.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import tempfile
import warnings
from pathlib import Path
from typing import Any

from guard import manifest as mf
from guard.backends.base import Backend, BuildInfo, BuildRequest
from guard.errors import GuardError, UsageError
from guard.fsutil import atomic_write_text, file_sha256
from guard.model import ModelSpec
from guard.suite import ModelEntry

GUARD_DIR = ".guard"


def tuning_cache_pin(path: str, entry: ModelEntry) -> dict[str, Any]:
    """{path, sha256} of a tuning cache (a file, or a directory of files), before the build.

    Relative paths are relative to the suite file. Hits and misses come from the backend.
    """
    p = Path(path)
    if not p.is_absolute():
        p = entry.suite_dir / p
    p = p.resolve()
    if not p.exists():
        raise UsageError(
            f"options.tuning_cache: {p} does not exist",
            where=entry.where,
            hint="Point it at a tuning database (run the nightly tuning job), or "
            "remove the option to build untuned.",
        )
    h = hashlib.sha256()
    files = sorted(f for f in p.rglob("*") if f.is_file()) if p.is_dir() else [p]
    for f in files:
        h.update(str(f.relative_to(p) if p.is_dir() else f.name).encode() + b"\0")
        h.update(f.read_bytes())
    return {"path": str(p), "sha256": h.hexdigest(), "entries": None, "hits": None,
            "misses": None}


def _atomic_json(path: Path, doc: dict[str, Any]) -> None:
    atomic_write_text(path, json.dumps(doc, indent=2, sort_keys=True, default=str) + "\n")


def _backend_options(entry: ModelEntry, backend_name: str) -> tuple[dict[str, Any],
                                                                     dict[str, str]]:
    """The options passed to the backend, and the extra keys that only key the artefact."""
    options = dict(entry.options.get(backend_name, {}))
    key_only: dict[str, str] = {}
    if backend_name == "bundled" and entry.profile and "profile" not in options:
        options["profile"] = entry.profile
    profile = options.get("profile")
    if isinstance(profile, str) and (profile.endswith((".yaml", ".yml")) or "/" in profile):
        pp = Path(profile) if Path(profile).is_absolute() else entry.suite_dir / profile
        if not pp.is_file():
            raise UsageError(
                f"profile {profile!r}: no such file ({pp})",
                where=entry.where,
                hint="Name a shipped profile (guard partition --help) or a YAML "
                "file relative to the suite.",
            )
        options["profile"] = str(pp.resolve())
        key_only["profile_sha256"] = file_sha256(pp)
    return options, key_only


def _reuse(final: Path) -> tuple[dict[str, Any], BuildInfo] | None:
    """A previous build in ``final``, when it is whole; a damaged entry is rebuilt."""
    build_json = final / "build.json"
    if not ((final / "manifest.json").is_file() and build_json.is_file()):
        return None
    try:
        cached = mf.load_manifest(final / "manifest.json")
        info = BuildInfo(**json.loads(build_json.read_text()))
    except (GuardError, OSError, TypeError, json.JSONDecodeError):
        return None
    return (cached, info) if (final / info.payload).exists() else None


def build_artefact(backend: Backend, entry: ModelEntry, spec: ModelSpec, backend_name: str,
                   workdir: Path) -> tuple[Path, dict[str, Any], BuildInfo, bool]:
    """Build (or reuse) the content-addressed artefact for one model and backend.

    Returns (artefact dir, manifest, build info, reused).
    """
    compiler, runtime = backend.versions()
    options, key_only = _backend_options(entry, backend_name)
    cache_path = options.pop("tuning_cache", None)
    cache_pin = tuning_cache_pin(cache_path, entry) if cache_path else None
    manifest = mf.build_manifest(
        compiler=compiler, runtime=runtime, target_raw=entry.target, threads=entry.threads,
        model_path=spec.path, model_opset=spec.opset, model_inputs=spec.inputs_manifest(),
        tuning_cache=cache_pin, model_sha256=spec.sha256)
    if cache_pin is not None:
        # The cache's content hash is part of the key: a changed cache is a new artefact.
        key_only["tuning_cache_sha256"] = cache_pin["sha256"]
    key = mf.artefact_key(manifest, {**options, **key_only})
    final = mf.artefact_dir(workdir / GUARD_DIR / "artefacts", entry.name, backend_name, key)
    reused = _reuse(final)
    if reused is not None:
        return final, reused[0], reused[1], True
    final.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{final.name}.", dir=final.parent))
    try:
        req = BuildRequest(model_path=spec.path, input_shapes=dict(spec.shapes),
                           target_raw=entry.target,
                           target_canonical=manifest["target"]["canonical"],
                           threads=entry.threads, out_dir=tmp,
                           tuning_cache=Path(cache_pin["path"]) if cache_pin else None,
                           options=options)
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            info = backend.build(req)
        info.warnings = list(dict.fromkeys([*info.warnings, *(str(w.message) for w in caught)]))
        # The backend may pin more than its versions (pipeline name, optimisation level).
        manifest = mf.build_manifest(
            compiler=info.compiler, runtime=info.runtime, target_raw=entry.target,
            threads=entry.threads, model_path=spec.path, model_opset=spec.opset,
            model_inputs=spec.inputs_manifest(), model_sha256=spec.sha256,
            tuning_cache={**(cache_pin or {}), **info.tuning} if (info.tuning or cache_pin)
            else None)
        mf.write_manifest(tmp / "manifest.json", manifest)
        _atomic_json(tmp / "build.json",
                     {"payload": info.payload, "compiler": info.compiler,
                      "runtime": info.runtime, "session_options": info.session_options,
                      "tuning": info.tuning, "graph": info.graph, "warnings": info.warnings})
        if final.exists():
            shutil.rmtree(final)
        os.replace(tmp, final)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    return final, manifest, info, False
