"""The golden store: reference outputs per suite and model, with who produced them and how.

Layout, one directory per model under the suite's golden root
(``<suite dir>/goldens/<suite>/<model>/``):

- ``golden.json``  schema_version, producer (reference runtime + its settings), the model's
  sha256, input and output names/dtypes/shapes/sha256, and the update history;
- ``inputs.npz``, ``outputs.npz``  the arrays (``allow_pickle=False`` on load).

A golden is created on first run and reported as created; an existing golden changes only
through ``guard golden update ... --reason``, which appends who/when/why/old/new hashes.
Writes are atomic per file and the JSON goes last, so a killed write leaves either the old
golden or a directory the loader reports as incomplete, never a mixed one.
"""

from __future__ import annotations

import datetime as _dt
import getpass
import hashlib
import io
import json
import os
import re
import subprocess
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from guard.core.errors import SchemaError, UsageError
from guard.core.fsutil import (
    USER_OS_ERRNOS,
    BoundedReadError,
    atomic_write_bytes,
    describe_os_error,
    read_bounded,
    read_bounded_text,
)
from guard.core.json_types import JsonObject
from guard.core.schema import Schema
from guard.golden.meta import GoldenJson, GoldenMeta, HistoryEntry, InputSpecRecord, Producer

SCHEMA_VERSION = 1
_RESTORE = (
    "Restore it from git, or re-create it: guard golden update <suite> --model <name> "
    "--reason '...'."
)


class GoldenCorruptError(SchemaError):
    """A golden on disk is unreadable, incomplete or edited; ``golden update`` replaces it."""


_GOLDEN = Schema("golden", SCHEMA_VERSION, _RESTORE, error=GoldenCorruptError)


# An array file (npz) may hold a model's whole input or output: beyond this, a golden is a
# mistake; a suite's limits.max_tensor_bytes sets the cap each run uses.
MAX_GOLDEN_BYTES = 2 * 1024**3

_SAFE = re.compile(r"\A[A-Za-z0-9][A-Za-z0-9_.\-]*\Z")


def array_sha256(a: np.ndarray) -> str:
    """Hash of dtype, shape and bytes: any change in any of them is visible."""
    a = np.asarray(a, order="C")  # keeps 0-d arrays 0-d
    h = hashlib.sha256()
    h.update(f"{a.dtype.str}|{a.shape}|".encode())
    h.update(a.tobytes())
    return h.hexdigest()


def outputs_sha256(outputs: list[np.ndarray]) -> str:
    h = hashlib.sha256()
    for a in outputs:
        h.update(array_sha256(a).encode())
    return h.hexdigest()


@dataclass
class Golden:
    model: str
    inputs: dict[str, np.ndarray]
    outputs: dict[str, np.ndarray]  # name -> array, in graph-output order
    meta: GoldenMeta = field(default_factory=GoldenMeta)

    @property
    def output_list(self) -> list[np.ndarray]:
        return list(self.outputs.values())

    @property
    def sha256(self) -> str:
        return outputs_sha256(self.output_list)


def _npz_bytes(arrays: dict[str, np.ndarray]) -> bytes:
    buf = io.BytesIO()
    # Keys are positional (a0, a1, ...) so any tensor name is safe; names live in the JSON.
    # numpy's stub types the keyword arrays as if one could be named allow_pickle (bool).
    np.savez_compressed(
        buf,
        **{
            f"a{i}": np.asarray(v, order="C")  # type: ignore[arg-type]
            for i, v in enumerate(arrays.values())
        },
    )
    return buf.getvalue()


def _who() -> str:
    try:
        out = subprocess.run(
            ["git", "config", "user.name"], capture_output=True, text=True, timeout=5
        )
        if out.returncode == 0 and out.stdout.strip():
            return out.stdout.strip()
    except (OSError, subprocess.SubprocessError):
        pass
    try:
        return getpass.getuser()
    except Exception:  # noqa: BLE001 - no passwd entry in some containers
        return os.environ.get("USER", "unknown")


class GoldenStore:
    """Goldens of one suite, under ``root`` (e.g. suites/goldens/smoke)."""

    def __init__(self, root: Path):
        self.root = Path(root)

    def _dir(self, model: str) -> Path:
        if not _SAFE.match(model):
            raise UsageError(f"model name {model!r} cannot name a golden directory")
        return self.root / model

    def exists(self, model: str) -> bool:
        return os.path.lexists(self._dir(model) / "golden.json")

    def load(self, model: str, max_bytes: int = MAX_GOLDEN_BYTES) -> Golden | None:
        """The model's golden; None when it has none (not even arrays); ``max_bytes`` caps
        each array file on disk and each array it holds (guard.suite.limits)."""
        d = self._dir(model)
        meta_path = d / "golden.json"
        if not os.path.lexists(meta_path):
            left = [p.name for p in (d / "inputs.npz", d / "outputs.npz") if os.path.lexists(p)]
            if left:
                # A deleted golden.json must not make the next run produce a new golden
                # from whatever the model outputs now: that would hide the regression.
                raise GoldenCorruptError(
                    f"golden.json is missing beside {' and '.join(left)} (deleted, or its "
                    "first write was cut short)",
                    where=str(meta_path),
                    hint=_RESTORE,
                )
            return None
        try:
            meta = json.loads(read_bounded_text(meta_path))
        except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
            reason = getattr(exc, "reason", None) or str(exc).splitlines()[0][:200]
            raise GoldenCorruptError(
                f"golden is unreadable: {reason}", where=str(meta_path), hint=_RESTORE
            ) from None
        meta = _GOLDEN.check(meta, meta_path)
        try:
            return self._arrays(model, d, meta, max_bytes)
        except GoldenCorruptError:
            raise
        except (KeyError, TypeError, ValueError, AttributeError) as exc:
            raise GoldenCorruptError(
                f"golden.json is incomplete or edited ({type(exc).__name__}: {str(exc)[:100]})",
                where=str(meta_path),
                hint=_RESTORE,
            ) from None

    def load_replaceable(self, model: str) -> tuple[Golden | None, str | None]:
        """(golden, None), or (None, why) when the one on disk is corrupt: for an update."""
        try:
            return self.load(model), None
        except GoldenCorruptError as exc:
            return None, str(exc)

    def _arrays(self, model: str, d: Path, meta: JsonObject, max_bytes: int) -> Golden:
        """The golden's arrays, each checked against the sha256 golden.json records (``meta``,
        golden.json as loaded: a key it lacks or a value of another type is corruption)."""
        arrays = {}
        for part in ("inputs", "outputs"):
            p = d / f"{part}.npz"
            try:
                # Read as bytes first: only a regular file, never blocking on a FIFO.
                raw = read_bounded(p, max_bytes)
            except (OSError, BoundedReadError) as exc:
                why = getattr(exc, "reason", None) or describe_os_error(exc)
                raise GoldenCorruptError(
                    f"golden {part} cannot be read: {why}", where=str(p), hint=_RESTORE
                ) from None
            try:
                with np.load(io.BytesIO(raw), allow_pickle=False) as z:
                    _check_sizes(z, p, max_bytes)
                    arrs = [z[f"a{i}"] for i in range(len(meta[part]))]
            except GoldenCorruptError:
                raise
            except Exception as exc:  # noqa: BLE001 - zip, zlib, npy header: all corruption
                why = str(exc).splitlines()[0][:200] if str(exc) else type(exc).__name__
                raise GoldenCorruptError(
                    f"golden {part} are missing or corrupt: {why}", where=str(p), hint=_RESTORE
                ) from None
            named = {}
            # golden.json is written with sorted keys; the arrays are in graph order, which
            # "order" records (goldens written before it existed had one input/output).
            names = meta.get("order", {}).get(part) or list(meta[part])
            for name, a in zip(names, arrs, strict=True):
                info = meta[part][name]
                if array_sha256(a) != info["sha256"]:
                    raise GoldenCorruptError(
                        f"golden {part[:-1]} {name!r} does not match its "
                        "recorded sha256 (edited or corrupt)",
                        where=str(p),
                        hint=_RESTORE,
                    )
                named[name] = a
            arrays[part] = named
        return Golden(
            model=model,
            inputs=arrays["inputs"],
            outputs=arrays["outputs"],
            meta=GoldenMeta.from_json(meta),
        )

    def save(
        self,
        model: str,
        inputs: dict[str, np.ndarray],
        outputs: dict[str, np.ndarray],
        *,
        producer: Producer,
        model_sha256: str,
        reason: str | None,
        previous: Golden | None = None,
        input_specs: dict[str, InputSpecRecord] | None = None,
    ) -> Golden:
        d = self._dir(model)
        try:
            return self._save(
                d,
                model,
                inputs,
                outputs,
                producer=producer,
                model_sha256=model_sha256,
                reason=reason,
                previous=previous,
                input_specs=input_specs,
            )
        except OSError as exc:
            if exc.errno not in USER_OS_ERRNOS:
                raise
            raise UsageError(
                f"cannot write the golden: {describe_os_error(exc)}",
                where=str(d),
                hint="Make the golden directory writable (or pass --golden-dir DIR).",
            ) from None

    def _save(
        self,
        d: Path,
        model: str,
        inputs: dict[str, np.ndarray],
        outputs: dict[str, np.ndarray],
        *,
        producer: Producer,
        model_sha256: str,
        reason: str | None,
        previous: Golden | None,
        input_specs: dict[str, InputSpecRecord] | None = None,
    ) -> Golden:
        new = Golden(model=model, inputs=inputs, outputs=outputs)
        if (
            previous is not None
            and _same_content(previous, new, model_sha256)
            and (input_specs is None or previous.meta.input_specs == input_specs)
        ):
            # An update that changes nothing writes nothing and adds no history entry.
            return previous
        d.mkdir(parents=True, exist_ok=True)
        now = _dt.datetime.now(_dt.UTC).isoformat(timespec="seconds")
        history = list(previous.meta.history) if previous else []
        entry: HistoryEntry = {
            "who": _who(),
            "when": now,
            "why": reason or "created on first run",
            "old_sha256": previous.sha256 if previous else None,
            "new_sha256": new.sha256,
            "producer": producer,
        }
        history.append(entry)
        created = previous.meta.created if previous is not None else None
        meta: GoldenJson = {
            "schema_version": SCHEMA_VERSION,
            "model": model,
            "model_sha256": model_sha256,
            "producer": producer,
            "created": created if created is not None else now,
            "updated": now,
            "outputs_sha256": new.sha256,
            "order": {"inputs": list(inputs), "outputs": list(outputs)},
            "inputs": {
                k: {"dtype": str(v.dtype), "shape": list(v.shape), "sha256": array_sha256(v)}
                for k, v in inputs.items()
            },
            "outputs": {
                k: {"dtype": str(v.dtype), "shape": list(v.shape), "sha256": array_sha256(v)}
                for k, v in outputs.items()
            },
            "history": history,
        }
        if input_specs is not None:  # what the inputs were made from: a spec change is named
            meta["input_specs"] = input_specs
        new.meta = GoldenMeta.from_json(meta)
        atomic_write_bytes(d / "inputs.npz", _npz_bytes(inputs))
        atomic_write_bytes(d / "outputs.npz", _npz_bytes(outputs))
        atomic_write_bytes(
            d / "golden.json", (json.dumps(meta, indent=2, sort_keys=True) + "\n").encode()
        )
        return new


def _check_sizes(z: Any, p: Path, max_bytes: int) -> None:
    """Each array's uncompressed size, from the zip directory, is within ``max_bytes``: a
    small compressed file must not expand past the limit (zipfile stops at that size)."""
    for info in z.zip.infolist():
        if info.file_size > max_bytes:
            raise GoldenCorruptError(
                f"golden array {info.filename!r} is {info.file_size} bytes uncompressed, over "
                f"the limit of {max_bytes} bytes (limits.max_tensor_bytes)",
                where=str(p),
                hint="Raise limits.max_tensor_bytes in the suite if the model's tensors are "
                "that large.",
            )


def _same_content(previous: Golden, new: Golden, model_sha256: str) -> bool:
    """Same model, same inputs and the same outputs, array for array (names, order, bytes)."""
    if previous.meta.model_sha256 != model_sha256 or previous.sha256 != new.sha256:
        return False
    for part in ("inputs", "outputs"):
        old, cur = getattr(previous, part), getattr(new, part)
        if list(old) != list(cur):
            return False
        if any(array_sha256(old[k]) != array_sha256(cur[k]) for k in cur):
            return False
    return True
