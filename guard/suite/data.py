"""Real input data: arrays from ``.npy``, ``.npz`` and ONNX ``TensorProto`` (``.pb``) files.

A suite may feed an input from a file instead of a seed::

    inputs:
      x: {file: batch.npz, key: x}     # .npz: the array under 'key' (default: the input's name)
      y: {file: y.npy}                 # .npy: the one array
      z: {file: data/input_2.pb}       # a serialised onnx.TensorProto

and a model may point at a directory in the ONNX test-data layout (``test_data:
test_data_set_0``): ``input_K.pb`` feed the model's inputs (by the tensor's name, else by
position) and ``output_K.pb`` are the expected outputs, a second golden that every
backend's outputs are checked against (the ``expected`` check).

Every failure is one ModelError that names the file (and key) and what differed: a missing
key, a shape or dtype that disagrees with the model's input, a ``.pb`` that is not a
TensorProto. Arrays are read with ``allow_pickle=False``.
"""

from __future__ import annotations

import functools
import re
import zipfile
from pathlib import Path

import numpy as np
import onnx
from google.protobuf.message import DecodeError
from onnx import numpy_helper

from guard.core.errors import ModelError
from guard.core.fsutil import (
    BoundedReadError,
    describe_os_error,
    read_bounded,
    regular_file_size,
)

# An input file is read whole; past this it is refused before reading (a suite's data, not
# a data set: 2 GiB is the largest single input guard allocates anyway).
MAX_DATA_BYTES = 2 * 1024**3
SUFFIXES = (".npy", ".npz", ".pb")
_TEST_FILE = re.compile(r"^(input|output)_(\d+)\.pb$")


def _read_pb(path: Path) -> np.ndarray:
    try:
        raw = read_bounded(path, MAX_DATA_BYTES)
    except BoundedReadError as exc:
        raise ModelError(exc.reason, where=str(path)) from None
    tensor = onnx.TensorProto()
    try:
        tensor.ParseFromString(raw)
    except DecodeError as exc:
        raise ModelError(
            f"is not a serialised onnx.TensorProto ({exc})",
            where=str(path),
            hint="Write it with onnx.numpy_helper.from_array(a, name).SerializeToString().",
        ) from None
    # Protobuf parses many byte strings (an empty file, another message such as a model)
    # into a tensor of no element type, or whose data do not fill its dims: not a tensor.
    try:
        arr = numpy_helper.to_array(tensor)
    except (ValueError, TypeError, KeyError) as exc:
        raise ModelError(
            f"is not a valid onnx.TensorProto ({' '.join(str(exc).split())[:160]})",
            where=str(path),
            hint="Write it with onnx.numpy_helper.from_array(a, name).SerializeToString().",
        ) from None
    return np.asarray(arr)


def tensor_name(path: Path) -> str:
    """The name a ``.pb`` TensorProto carries ('' when it has none)."""
    tensor = onnx.TensorProto()
    try:
        tensor.ParseFromString(read_bounded(path, MAX_DATA_BYTES))
    except (DecodeError, BoundedReadError, OSError):
        return ""  # read again, with its error, when the data is loaded
    return tensor.name


def load_array(path: Path, key: str | None, input_name: str) -> np.ndarray:
    """The array of one input file (``key`` picks an array of an ``.npz``)."""
    path = Path(path)
    where = f"{path}" + (f" (key {key!r})" if key else "")
    try:
        if path.suffix == ".pb":
            return _read_pb(path)
        # a FIFO, directory or device is refused here, named (np.load would block on a FIFO)
        if regular_file_size(path) > MAX_DATA_BYTES:
            raise ModelError(
                f"is larger than guard's {MAX_DATA_BYTES // 2**30} GiB limit", where=str(path)
            )
        if path.suffix == ".npy":
            return np.asarray(np.load(path, allow_pickle=False))
        if path.suffix == ".npz":
            with np.load(path, allow_pickle=False) as npz:
                want = key or input_name
                if want not in npz.files:
                    raise ModelError(
                        f"has no array named {want!r} (it holds: "
                        f"{', '.join(npz.files) or 'nothing'})",
                        where=str(path),
                        hint=f"Name the array with inputs.{input_name}.key.",
                    )
                return np.asarray(npz[want])
    except FileNotFoundError:
        raise ModelError(
            "input data file not found",
            where=where,
            hint="Paths in inputs.*.file are relative to the suite file.",
        ) from None
    except (ValueError, OSError, zipfile.BadZipFile, EOFError) as exc:
        msg = describe_os_error(exc) if isinstance(exc, OSError) else str(exc)
        raise ModelError(
            f"cannot read input data: {' '.join(msg.split())[:160]}",
            where=where,
            hint="Write it with numpy.save / numpy.savez (no pickled objects).",
        ) from None
    raise ModelError(
        f"unknown input data format {path.suffix!r}",
        where=str(path),
        hint=f"Use one of {', '.join(SUFFIXES)}.",
    )


@functools.lru_cache(maxsize=16)
def _cached(path: str, key: str | None, input_name: str, stamp: tuple[int, int]) -> np.ndarray:
    arr = load_array(Path(path), key, input_name)
    arr.setflags(write=False)  # shared between callers: nobody may change it
    return arr


def read_input(path: str, key: str | None, input_name: str) -> np.ndarray:
    """``load_array``, read once per file version (bind and make_inputs both need it)."""
    try:
        st = Path(path).stat()
    except OSError:
        return load_array(Path(path), key, input_name)  # its own error names the file
    return _cached(path, key, input_name, (st.st_mtime_ns, st.st_size))


def check_array(arr: np.ndarray, name: str, dtype: np.dtype, dims: tuple, where: str) -> np.ndarray:
    """``arr`` as the model's input ``name`` takes it, or a ModelError naming what differs.

    ``dims`` are the model's declared dims (ints fixed, strings or None symbolic)."""
    if arr.dtype != dtype:
        raise ModelError(
            f"inputs.{name}: the data is {arr.dtype}, the model's input is {dtype}",
            where=where,
            hint="Save the array in the model's dtype (e.g. a.astype(np.float32)).",
        )
    if dims and len(dims) != arr.ndim:
        raise ModelError(
            f"inputs.{name}: the data has shape {list(arr.shape)} (rank {arr.ndim}), the "
            f"model's input has rank {len(dims)}",
            where=where,
        )
    for ax, (have, want) in enumerate(zip(arr.shape, dims, strict=False)):
        if isinstance(want, int) and want >= 0 and have != want:
            raise ModelError(
                f"inputs.{name}: the data has shape {list(arr.shape)}, the model fixes dim "
                f"{ax} to {want}",
                where=where,
            )
    return np.ascontiguousarray(arr) if arr.ndim else arr


def data_set_files(directory: Path) -> tuple[list[Path], list[Path]]:
    """The ``input_K.pb`` and ``output_K.pb`` files of an ONNX test-data directory, by K."""
    if not directory.is_dir():
        raise ModelError(
            "test_data: not a directory",
            where=str(directory),
            hint="Point test_data at an ONNX test_data_set_N directory (input_K.pb, output_K.pb).",
        )
    found: dict[str, dict[int, Path]] = {"input": {}, "output": {}}
    for p in directory.iterdir():
        m = _TEST_FILE.match(p.name)
        if m:
            found[m.group(1)][int(m.group(2))] = p
    out: list[list[Path]] = []
    for kind in ("input", "output"):
        ks = sorted(found[kind])
        if ks != list(range(len(ks))):
            missing = min(set(range(len(ks) + 1)) - set(ks))
            raise ModelError(
                f"test_data: {kind}_{missing}.pb is missing (found "
                f"{', '.join(f'{kind}_{k}.pb' for k in ks)})",
                where=str(directory),
            )
        out.append([found[kind][k] for k in ks])
    if not out[0]:
        raise ModelError(
            "test_data: no input_K.pb files",
            where=str(directory),
            hint="An ONNX test-data directory holds input_0.pb, ... and output_0.pb, ....",
        )
    return out[0], out[1]


def expected_outputs(files: tuple[str, ...], output_names: tuple[str, ...]) -> list[np.ndarray]:
    """The expected outputs (``output_K.pb``) in the model's output order.

    A file whose tensor names a model output goes to that output; unnamed ones go by
    position."""
    if len(files) != len(output_names):
        raise ModelError(
            f"test_data: {len(files)} output_K.pb files for a model with "
            f"{len(output_names)} outputs ({', '.join(output_names)})",
            where=str(Path(files[0]).parent) if files else "test_data",
        )
    arrays = {Path(f): _read_pb(Path(f)) for f in files}
    by_name = {tensor_name(Path(f)): Path(f) for f in files}
    if set(output_names) <= set(by_name):
        return [arrays[by_name[n]] for n in output_names]
    return [arrays[Path(f)] for f in files]
