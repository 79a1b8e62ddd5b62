"""Artefact build and cache: one content-addressed, pinned artefact per model and backend.

``build_artefact`` keys the artefact directory by the manifest's pinned hash plus the
backend options; when nothing pinned changed, the previous build is reused.

What survives faults:

- A build runs in a forked child (guard.core.isolate) under the model's ``build_timeout_s``: a
  native crash or a runaway build is an error result for that model, not the end of the run.
- It fills a private temporary directory ``.<key>.<pid>.*`` that is renamed into place
  complete, never over a whole artefact: a concurrent reader sees the artefact or nothing,
  a concurrent builder of the same key keeps the first complete one. A damaged artefact is
  renamed aside (``.<key>.trash.<pid>.*``) before the new one goes in. Temporary and trash
  directories whose process is gone (a kill) are removed by the next build.
- ``hashes.json`` records the sha256 of every file of the artefact; reuse verifies all of
  them and the backend's own record (guard.run.cache_check), and a mismatch (an edited
  ``ort.json``, a corrupted payload, a ``kernels.o`` edited with ``hashes.json`` rewritten
  to match) moves the artefact to ``.guard/quarantine/`` with a warning and rebuilds.
- A full or read-only disk is a one-line error naming the directory (exit 2).
"""

from __future__ import annotations

import errno
import hashlib
import json
import os
import re
import shutil
import tempfile
import time
import warnings
from pathlib import Path
from typing import TypedDict

from guard import manifest as mf
from guard.backends.base import Backend, BuildInfo, BuildRequest
from guard.core import fault
from guard.core.errors import GuardError, UsageError
from guard.core.fsutil import (
    USER_OS_ERRNOS,
    atomic_write_text,
    describe_os_error,
    file_sha256,
    read_bounded_text,
)
from guard.core.isolate import is_isolated_failure, run_isolated
from guard.core.json_types import JsonObject
from guard.manifest.written import ComponentPins, ManifestJson, QuantizationPins, TuningObservations
from guard.run.cache_check import poisoned, quarantine, write_hashes
from guard.suite import ModelEntry
from guard.suite.model import ModelSpec, make_inputs

GUARD_DIR = ".guard"
# Temporary (``.<key>.<pid>.<random>``) and trash (``.<key>.trash.<pid>.<random>``)
# directories beside the artefacts; the pid says whether their owner still runs.
_TMP_RE = re.compile(r"^\.(?P<key>[^.].*?)\.(?:trash\.)?(?P<pid>\d+)\.[^.]+$")
# Temporary directories of guards before the pid was in the name: removed after this long.
_STALE_UNNAMED_S = 6 * 3600


class BuildJson(TypedDict):
    """An artefact's build.json: its BuildInfo, read back into one when it is reused."""

    payload: str
    compiler: ComponentPins
    runtime: ComponentPins
    session_options: JsonObject
    tuning: TuningObservations
    graph: JsonObject | None
    warnings: list[str]


class CachePin(TypedDict):
    """A tuning cache's pin before the build: where it is and its content hash (the
    look-ups are the backend's to fill in)."""

    path: str
    sha256: str
    entries: None
    hits: None
    misses: None


def tuning_cache_pin(path: str, entry: ModelEntry) -> CachePin:
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
    return {"path": str(p), "sha256": h.hexdigest(), "entries": None, "hits": None, "misses": None}


def _int8_pins(entry: ModelEntry, spec: ModelSpec) -> QuantizationPins | None:
    if entry.quantize is None:
        return None
    from guard.run.int8 import int8_pins

    return int8_pins(spec.path)


def _atomic_json(path: Path, doc: BuildJson) -> None:
    atomic_write_text(path, json.dumps(doc, indent=2, sort_keys=True, default=str) + "\n")


def _backend_options(entry: ModelEntry, backend_name: str) -> tuple[JsonObject, dict[str, str]]:
    """The options passed to the backend (the suite's, as the user wrote them), and the
    extra keys that only key the artefact."""
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


def _write_hashes(root: Path) -> None:
    if not write_hashes(root):
        raise UsageError("the build left a link or special file in the artefact", where=str(root))


def _observed(pin: CachePin | None, tuning: TuningObservations) -> TuningObservations | None:
    """The manifest's tuning_cache: what the build observed over the cache's pin."""
    if not (tuning or pin):
        return None
    return {**(pin or {}), **tuning}


def _reuse(
    final: Path, backend: Backend | None = None, guard_dir: Path | None = None
) -> tuple[ManifestJson, BuildInfo] | None:
    """A previous build in ``final``, when it is whole and unaltered; otherwise None (rebuild).

    A complete artefact that fails its hashes (guard.run.cache_check) is poisoned: moved to
    the quarantine under ``guard_dir`` with a warning (or only refused, without one)."""
    build_json = final / "build.json"
    if not ((final / "manifest.json").is_file() and build_json.is_file()):
        return None
    why = poisoned(final, backend)
    if why is not None:
        if guard_dir is not None:
            quarantine(final, guard_dir, why)
        return None
    try:
        cached = mf.load_manifest(final / "manifest.json")
        info = BuildInfo(**json.loads(read_bounded_text(build_json)))
    except (GuardError, OSError, TypeError, UnicodeDecodeError, json.JSONDecodeError):
        return None
    return (cached, info) if (final / info.payload).exists() else None


def _pid_alive(pid: int) -> bool:
    if pid == os.getpid():
        return True
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def clean_stale(parent: Path, now: float | None = None) -> list[Path]:
    """Remove temporary/trash directories in ``parent`` left by guards that are gone."""
    removed: list[Path] = []
    try:
        entries = list(os.scandir(parent))
    except OSError:
        return removed
    now = time.time() if now is None else now
    for e in entries:
        if not e.name.startswith(".") or not e.is_dir(follow_symlinks=False):
            continue
        m = _TMP_RE.match(e.name)
        if m is not None:
            stale = not _pid_alive(int(m.group("pid")))
        else:
            try:
                stale = now - e.stat(follow_symlinks=False).st_mtime > _STALE_UNNAMED_S
            except OSError:
                continue
        if stale:
            shutil.rmtree(e.path, ignore_errors=True)
            removed.append(Path(e.path))
    return removed


def _install(tmp: Path, final: Path) -> tuple[ManifestJson, BuildInfo] | None:
    """Rename the complete ``tmp`` into ``final``; never over a whole artefact.

    Returns None when ours went in, or the (manifest, info) of a whole artefact another
    guard installed first (ours is then discarded).
    """
    for _ in range(3):
        try:
            os.rename(tmp, final)  # an empty or missing ``final`` is replaced in one step
            return None
        except OSError as exc:
            if exc.errno not in (errno.ENOTEMPTY, errno.EEXIST):
                raise
        theirs = _reuse(final)
        if theirs is not None:
            shutil.rmtree(tmp, ignore_errors=True)
            return theirs
        # Damaged: move it aside in one step (readers see it or nothing), then retry.
        trash = Path(
            tempfile.mkdtemp(prefix=f".{final.name}.trash.{os.getpid()}.", dir=final.parent)
        )
        try:
            os.rename(final, trash / "old")
        except FileNotFoundError:
            pass
        finally:
            shutil.rmtree(trash, ignore_errors=True)
    raise UsageError(
        "another process keeps replacing this artefact",
        where=str(final),
        hint="Run one guard per working directory at a time, or retry.",
    )


def _disk_problem(exc: BaseException, where: Path, model: Path) -> UsageError | None:
    """A full or read-only disk behind a build failure, as the user's problem to fix."""
    if isinstance(exc, OSError) and exc.errno in USER_OS_ERRNOS:
        return UsageError(
            f"cannot write the artefact: {describe_os_error(exc)}",
            where=str(exc.filename or where),
            hint="Free space or permissions there (or run guard in another directory).",
        )
    try:
        st = os.statvfs(where)
        free = st.f_bavail * st.f_frsize
        need = 2 * model.stat().st_size + (16 << 20)
    except OSError:
        return None
    if free < need:
        # The backend's own message (onnxruntime: "INVALID_PROTOBUF") blames the model.
        return UsageError(
            f"the build failed with only {free >> 20} MiB free on the artefact disk (it needs "
            f"about {need >> 20} MiB): no space left on the device",
            where=str(where),
            hint="Free space there (or run guard in another directory).",
        )
    return None


def _build_in_child(backend: Backend, req: BuildRequest) -> BuildInfo:
    """backend.build with the Python warnings it raises kept as build warnings."""
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        info = backend.build(req)
    info.warnings = list(dict.fromkeys([*info.warnings, *(str(w.message) for w in caught)]))
    return info


def build_artefact(
    backend: Backend, entry: ModelEntry, spec: ModelSpec, backend_name: str, workdir: Path
) -> tuple[Path, ManifestJson, BuildInfo, bool]:
    """Build (or reuse) the content-addressed artefact for one model and backend.

    Returns (artefact dir, manifest, build info, reused).
    """
    compiler, runtime = backend.versions()
    options, key_only = _backend_options(entry, backend_name)
    cache_path = options.pop("tuning_cache", None)
    cache_pin = tuning_cache_pin(cache_path, entry) if cache_path else None
    manifest = mf.build_manifest(
        compiler=compiler,
        runtime=runtime,
        target_raw=entry.target,
        threads=entry.threads,
        model_path=spec.path,
        model_opset=spec.opset,
        model_inputs=spec.inputs_manifest(),
        tuning_cache=_observed(cache_pin, {}),
        model_sha256=spec.sha256,
        quantization=_int8_pins(entry, spec),
    )
    if cache_pin is not None:
        # The cache's content hash is part of the key: a changed cache is a new artefact.
        key_only["tuning_cache_sha256"] = cache_pin["sha256"]
    key = mf.artefact_key(manifest, {**options, **key_only})
    final = mf.artefact_dir(workdir / GUARD_DIR / "artefacts", entry.name, backend_name, key)
    reused = _reuse(final, backend, workdir / GUARD_DIR)
    if reused is not None:
        return final, reused[0], reused[1], True
    try:
        final.parent.mkdir(parents=True, exist_ok=True)
        clean_stale(final.parent)
        tmp = Path(tempfile.mkdtemp(prefix=f".{final.name}.{os.getpid()}.", dir=final.parent))
    except OSError as exc:
        raise UsageError(
            f"cannot create the artefact directory: {describe_os_error(exc)}",
            where=str(final.parent),
            hint="Free space or permissions there (or run guard in another directory).",
        ) from None
    try:
        req = BuildRequest(
            model_path=spec.path,
            input_shapes=dict(spec.shapes),
            target_raw=entry.target,
            target_canonical=manifest["target"]["canonical"],
            threads=entry.threads,
            out_dir=tmp,
            tuning_cache=Path(cache_pin["path"]) if cache_pin else None,
            options=options,
            inputs=make_inputs(spec, dict(entry.inputs)),
        )
        try:
            info = run_isolated(
                _build_in_child,
                backend,
                req,
                what=f"the {backend_name} build of {entry.name}",
                where=entry.where,
                timeout_s=entry.build_timeout_s,
            )
        except Exception as exc:
            # A full disk surfaces as whatever the backend makes of a short write (onnxruntime
            # says INVALID_PROTOBUF about the user's model): say what it is.
            disk = None if is_isolated_failure(exc) else _disk_problem(exc, final.parent, spec.path)
            if disk is not None:
                raise disk from None
            raise
        # The backend may pin more than its versions (pipeline name, optimisation level).
        manifest = mf.build_manifest(
            compiler=info.compiler,
            runtime=info.runtime,
            target_raw=entry.target,
            threads=entry.threads,
            model_path=spec.path,
            model_opset=spec.opset,
            model_inputs=spec.inputs_manifest(),
            model_sha256=spec.sha256,
            tuning_cache=_observed(cache_pin, info.tuning),
            quantization=_int8_pins(entry, spec),
        )
        mf.write_manifest(tmp / "manifest.json", manifest)
        _atomic_json(
            tmp / "build.json",
            {
                "payload": info.payload,
                "compiler": info.compiler,
                "runtime": info.runtime,
                "session_options": info.session_options,
                "tuning": info.tuning,
                "graph": info.graph,
                "warnings": info.warnings,
            },
        )
        _write_hashes(tmp)
        fault.point("build")  # built, not yet installed
        theirs = _install(tmp, final)
    except OSError as exc:
        shutil.rmtree(tmp, ignore_errors=True)
        disk = _disk_problem(exc, final.parent, spec.path)
        if disk is None:
            raise
        raise disk from None
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    if theirs is not None:
        return final, theirs[0], theirs[1], True
    return final, manifest, info, False
