"""Calibration data: the sample inputs a profile is made from, and their sha256.

Accepted forms (``read_calibration``), each checked against the model's inputs:

- an ``.npz`` whose arrays are named after the model's inputs;
- a directory of ``.npz`` files (the same), or of ``.npy`` files for a one-input model;
- an ONNX ``test_data_set_N`` directory (``input_K.pb``, by tensor name else by position),
  or a directory holding several of them;
- a suite's inputs (``Calibration.from_feeds``: guard.run passes the seeded inputs).

An array either holds one sample per index of a leading extra axis (rank of the input + 1)
or has the input's rank and is split along its first axis into batch-1 samples (when the
model's first dim is dynamic or 1). The sha256 covers the samples' names, dtypes, shapes
and bytes in order, not the file format: one data set saved two ways hashes the same.
"""

from __future__ import annotations

import hashlib
import zipfile
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from pathlib import Path

import numpy as np

from guard.compiler.frontend.prepare import GraphInput
from guard.core.errors import ModelError, UsageError
from guard.suite import InputSpec, data
from guard.suite.model import ModelSpec, make_inputs

Feeds = dict[str, np.ndarray]


@dataclass(frozen=True)
class Calibration:
    """Samples (one feed dict each, every input bound to one shape) and where they came from."""

    samples: tuple[Feeds, ...]
    source: str
    sha256: str

    @property
    def shapes(self) -> dict[str, tuple[int, ...]]:
        return {k: tuple(v.shape) for k, v in self.samples[0].items()}

    @classmethod
    def from_feeds(cls, samples: Sequence[Feeds], source: str) -> Calibration:
        return cls(tuple(samples), source, data_sha256(samples))


def data_sha256(samples: Sequence[Mapping[str, np.ndarray]]) -> str:
    h = hashlib.sha256()
    for feeds in samples:
        for name in sorted(feeds):
            a = np.ascontiguousarray(feeds[name])
            h.update(f"{name}|{a.dtype.str}|{list(a.shape)}|".encode())
            h.update(a.tobytes())
    return h.hexdigest()


def _fmt(dims: Sequence[object]) -> str:
    return "[" + ", ".join("?" if d is None or isinstance(d, str) else str(d) for d in dims) + "]"


def _fits(shape: tuple[int, ...], dims: tuple[int | str | None, ...]) -> bool:
    return len(shape) == len(dims) and all(
        not isinstance(d, int) or d == s for s, d in zip(shape, dims, strict=True)
    )


def split_samples(arr: np.ndarray, gi: GraphInput, where: str) -> list[np.ndarray]:
    """One input's array as a list of samples in the model's input shape (see module doc)."""
    dims = gi.dims
    if arr.dtype != gi.dtype:
        raise ModelError(
            f"calibration input {gi.name!r} is {arr.dtype}, the model's input {gi.name!r} is "
            f"{gi.dtype}",
            where=where,
            hint="Save the array in the model's dtype (e.g. a.astype(np.float32)).",
        )
    if arr.ndim == len(dims) + 1 and _fits(arr.shape[1:], dims):
        return [np.ascontiguousarray(a) for a in arr]
    if arr.ndim == len(dims) and dims and not (isinstance(dims[0], int) and dims[0] > 1):
        if _fits((1, *arr.shape[1:]), dims):
            return [np.ascontiguousarray(arr[i : i + 1]) for i in range(arr.shape[0])]
    elif arr.ndim == len(dims) and _fits(arr.shape, dims):
        return [np.ascontiguousarray(arr)]
    raise ModelError(
        f"calibration input {gi.name!r} has shape {list(arr.shape)}, the model's input "
        f"{gi.name!r} is {_fmt(dims)}",
        where=where,
        hint="Give N samples as an array of shape [N, *input shape] (or [N, ...] along a "
        "dynamic batch dim).",
    )


def _from_arrays(
    arrays: Mapping[str, np.ndarray], inputs: Sequence[GraphInput], where: str
) -> list[Feeds]:
    names = [gi.name for gi in inputs]
    extra = sorted(set(arrays) - set(names))
    if extra:
        raise ModelError(
            f"calibration array {extra[0]!r} is not an input of the model (its inputs: "
            f"{', '.join(names)})",
            where=where,
            hint="Name each array after the model input it feeds.",
        )
    missing = [n for n in names if n not in arrays]
    if missing:
        raise ModelError(
            f"no calibration array for the model's input {missing[0]!r} (it holds: "
            f"{', '.join(sorted(arrays)) or 'nothing'})",
            where=where,
            hint="Name each array after the model input it feeds.",
        )
    per_input = {gi.name: split_samples(arrays[gi.name], gi, where) for gi in inputs}
    counts = {n: len(v) for n, v in per_input.items()}
    if len(set(counts.values())) > 1:
        raise ModelError(
            "calibration inputs hold different numbers of samples ("
            + ", ".join(f"{n}: {c}" for n, c in counts.items())
            + ")",
            where=where,
        )
    n = next(iter(counts.values()))
    return [{name: per_input[name][i] for name in names} for i in range(n)]


def _npz(path: Path, inputs: Sequence[GraphInput]) -> list[Feeds]:
    try:
        with np.load(path, allow_pickle=False) as npz:
            arrays = {k: np.asarray(npz[k]) for k in npz.files}
    except (ValueError, OSError, zipfile.BadZipFile, EOFError) as exc:
        raise ModelError(
            f"cannot read calibration data: {' '.join(str(exc).split())[:160]}",
            where=str(path),
            hint="Write it with numpy.savez (no pickled objects).",
        ) from None
    return _from_arrays(arrays, inputs, str(path))


def _data_set(directory: Path, inputs: Sequence[GraphInput]) -> list[Feeds]:
    files, _ = data.data_set_files(directory)
    if len(files) != len(inputs):
        raise ModelError(
            f"{len(files)} input_K.pb files for a model with {len(inputs)} inputs "
            f"({', '.join(gi.name for gi in inputs)})",
            where=str(directory),
        )
    named = {data.tensor_name(f): f for f in files}
    arrays: dict[str, np.ndarray] = {}
    for k, gi in enumerate(inputs):
        f = named.get(gi.name, files[k])
        arrays[gi.name] = data.load_array(f, None, gi.name)
    return _from_arrays(arrays, inputs, str(directory))


def _directory(directory: Path, inputs: Sequence[GraphInput]) -> list[Feeds]:
    if any(directory.glob("input_*.pb")):
        return _data_set(directory, inputs)
    sets = sorted(p for p in directory.glob("test_data_set_*") if p.is_dir())
    if sets:
        return [s for d in sets for s in _data_set(d, inputs)]
    out: list[Feeds] = []
    files = sorted(p for p in directory.iterdir() if p.suffix in (".npz", ".npy"))
    for f in files:
        if f.suffix == ".npz":
            out.extend(_npz(f, inputs))
        elif len(inputs) != 1:
            raise ModelError(
                f".npy calibration files feed a one-input model; this one has {len(inputs)} "
                f"inputs ({', '.join(gi.name for gi in inputs)})",
                where=str(f),
                hint="Use .npz files with one array per input name.",
            )
        else:
            arr = data.load_array(f, None, inputs[0].name)
            out.extend({inputs[0].name: a} for a in split_samples(arr, inputs[0], str(f)))
    if not files:
        raise UsageError(
            "the calibration directory holds no .npz, .npy or input_K.pb files",
            where=str(directory),
            hint="Give an .npz, a directory of .npy/.npz, or an ONNX test_data_set_N directory.",
        )
    return out


def read_calibration(path: Path, inputs: Sequence[GraphInput]) -> Calibration:
    """The samples at ``path`` for a model with ``inputs``; every error names the file."""
    if not path.exists():
        raise UsageError("calibration data not found", where=str(path))
    if path.is_dir():
        samples = _directory(path, inputs)
    elif path.suffix == ".npz":
        samples = _npz(path, inputs)
    elif path.suffix == ".npy" and len(inputs) == 1:
        arr = data.load_array(path, None, inputs[0].name)
        samples = [{inputs[0].name: a} for a in split_samples(arr, inputs[0], str(path))]
    else:
        raise UsageError(
            f"unknown calibration data format {path.suffix or path.name!r}",
            where=str(path),
            hint="Give an .npz (arrays named after the inputs), a directory of .npy/.npz, or "
            "an ONNX test_data_set_N directory.",
        )
    if not samples:
        raise UsageError("the calibration data holds no samples", where=str(path))
    first = {k: v.shape for k, v in samples[0].items()}
    for i, s in enumerate(samples):
        for k, v in s.items():
            if v.shape != first[k]:
                raise ModelError(
                    f"calibration sample {i} of input {k!r} has shape {list(v.shape)}, sample "
                    f"0 has {list(first[k])}",
                    where=str(path),
                    hint="Calibrate with one shape per input (the shape the model is built for).",
                )
    return Calibration.from_feeds(samples, str(path))


def seeded_samples(
    spec: ModelSpec, specs: dict[str, InputSpec], n: int, source: str
) -> Calibration:
    """``n`` samples of a suite entry's inputs: its distributions with seeds seed, seed+1, ...
    (an input read from a file is the same in every sample)."""
    if n < 1:
        raise UsageError(f"{source}: --samples must be at least 1 (got {n})")
    samples = []
    for k in range(n):
        moved = {
            name: replace(s, seed=s.seed + k) if not s.file else s for name, s in specs.items()
        }
        samples.append(make_inputs(spec, moved))
    return Calibration.from_feeds(samples, source)
