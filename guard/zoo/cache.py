"""The on-disk cache of built zoo models.

A model is built once per cache key and then read from disk. The key covers everything
that can change its bytes: the zoo name, the builder's version string, and the versions of
onnx, numpy (its random generators) and any package the builder declares (``depends``).
The file name keeps the model name readable: ``<name>-<16 hex of the key>.onnx``.

Writes are atomic: the bytes go to a temporary file in the same directory, are fsynced,
and ``os.replace`` moves them into place, so a build killed at any point leaves either no
file or the whole file (at worst a stray ``.*.tmp`` file, which is never read). Two
processes building the same model at once both write whole files with the same bytes.
Temp files a killed build left behind are removed by a later build of the same model once
they are an hour old (a live build of the largest model takes well under a minute).
"""

from __future__ import annotations

import collections
import hashlib
import json
import logging
import os
import time
from importlib import metadata
from pathlib import Path

import onnx

from guard.core.errors import InternalError, UsageError
from guard.core.fsutil import atomic_write_bytes
from guard.zoo.registry import ZooModel, spec

log = logging.getLogger(__name__)

STALE_TEMP_S = 3600.0

# name -> number of builds this process ran (not cache hits): tests and logs read it.
BUILDS: collections.Counter[str] = collections.Counter()


def default_cache_dir() -> Path:
    """``$GUARD_CACHE/zoo`` if GUARD_CACHE is set, else ``~/.cache/guard/zoo``."""
    root = os.environ.get("GUARD_CACHE")
    return Path(root) / "zoo" if root else Path.home() / ".cache" / "guard" / "zoo"


def cache_key(model: ZooModel) -> str:
    """sha256 over the name, builder version and the versions of what shapes the bytes."""
    packages = sorted({"onnx", "numpy", *model.depends})
    pins = {
        "name": model.name,
        "builder": model.version,
        "packages": {p: metadata.version(p) for p in packages},
    }
    return hashlib.sha256(json.dumps(pins, sort_keys=True).encode()).hexdigest()


def cached_file(name: str, cache_dir: Path | None = None) -> Path:
    """Where ``name`` is (or would be) cached; does not build."""
    model = spec(name)
    directory = Path(cache_dir) if cache_dir is not None else default_cache_dir()
    return directory / f"{model.name}-{cache_key(model)[:16]}.onnx"


def _remove_stale_temps(path: Path) -> None:
    """Delete temp files of ``path`` that a killed build left behind (older than an hour)."""
    cutoff = time.time() - STALE_TEMP_S
    for tmp in path.parent.glob(f".{path.name}.*.tmp"):
        try:
            if tmp.stat().st_mtime < cutoff:
                tmp.unlink()
        except OSError:  # another process removed or replaced it first
            pass


def model_path(name: str, cache_dir: Path | None = None) -> Path:
    """Path of zoo model ``name`` (``zoo:`` prefix optional), building and caching it if needed."""
    path = cached_file(name, cache_dir)
    if path.is_file():
        return path
    model = spec(name)
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
    except OSError as e:
        raise UsageError(
            f"cannot create the zoo cache directory {path.parent} ({e.strerror}).",
            where=f"zoo:{model.name}",
            hint="Set GUARD_CACHE to a writable directory.",
        ) from e
    log.info("building zoo:%s into %s (first use of this version)", model.name, path)
    _remove_stale_temps(path)
    data = model.build().SerializeToString()
    BUILDS[model.name] += 1
    try:  # full_check: the checker plus strict shape inference
        onnx.checker.check_model(data, full_check=True)
    except (onnx.checker.ValidationError, onnx.shape_inference.InferenceError) as e:
        raise InternalError(
            f"the built model fails onnx.checker: {e}",
            where=f"zoo:{model.name}",
            hint="This is a bug in guard/zoo; nothing was cached.",
        ) from e
    try:
        atomic_write_bytes(path, data)
    except OSError as e:
        raise UsageError(
            f"cannot write {path} ({e.strerror}).",
            where=f"zoo:{model.name}",
            hint="Set GUARD_CACHE to a writable directory with free space.",
        ) from e
    return path
