"""Loading a model safely, binding its dynamic dims, and making its inputs from seeds.

Everything here turns bad input into one ModelError line that names the file and the
input, dim or node at fault: a truncated file, bytes that are not ONNX, external data that
points outside the model's directory, a cycle, an unbound dynamic dim, an input too large
to allocate.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import onnx
from google.protobuf.message import DecodeError
from onnx import external_data_helper

from guard.compiler.frontend import prepare
from guard.compiler.frontend.prepare import GraphInput
from guard.core.errors import ModelError
from guard.core.fsutil import (
    BoundedReadError,
    describe_os_error,
    file_sha256,
    read_bounded,
    regular_file_size,
)
from guard.core.user_cache import note_once
from guard.suite import InputSpec, data
from guard.suite.limits import Limits, check_graph, check_tensor_bytes, default_limits

# A serialised ONNX protobuf cannot exceed 2 GiB (larger weights live in external data).
MAX_MODEL_BYTES = 2 * 1024**3
# Element types guard can make input data for (from the seeds in the suite).
_FEEDABLE = {
    onnx.TensorProto.FLOAT,
    onnx.TensorProto.DOUBLE,
    onnx.TensorProto.FLOAT16,
    onnx.TensorProto.INT8,
    onnx.TensorProto.INT16,
    onnx.TensorProto.INT32,
    onnx.TensorProto.INT64,
    onnx.TensorProto.UINT8,
    onnx.TensorProto.UINT16,
    onnx.TensorProto.UINT32,
    onnx.TensorProto.UINT64,
    onnx.TensorProto.BOOL,
}


@dataclass(frozen=True)
class ModelSpec:
    """A validated model with every input bound to a static shape."""

    path: Path
    sha256: str
    opset: int
    ir_version: int
    inputs: tuple[GraphInput, ...]
    shapes: dict[str, tuple[int, ...]]
    outputs: tuple[str, ...]
    notes: tuple[str, ...] = field(default=())  # one line each, e.g. a -1 dim bound

    def inputs_manifest(self) -> dict[str, dict]:
        return {
            i.name: {"dtype": str(i.dtype), "shape": list(self.shapes[i.name])} for i in self.inputs
        }


def _check_external_data(model: onnx.ModelProto, path: Path) -> None:
    base = path.parent.resolve()
    for tensor in external_data_helper._get_all_tensors(model):
        if tensor.data_location != onnx.TensorProto.EXTERNAL:
            continue
        info = {e.key: e.value for e in tensor.external_data}
        loc = info.get("location", "")
        target = (base / loc).resolve()
        if Path(loc).is_absolute() or not target.is_relative_to(base):
            raise ModelError(
                f"tensor {tensor.name!r} points its external data at {loc!r}, outside the "
                f"model's directory",
                where=str(path),
                hint="Keep external data files next to the model; guard refuses paths that "
                "escape it.",
            )
        try:
            size = regular_file_size(target)
        except FileNotFoundError:
            raise ModelError(
                f"tensor {tensor.name!r} needs external data file {loc!r}, which does not exist",
                where=str(path),
                hint="Copy the .data file next to the model.",
            ) from None
        except BoundedReadError as exc:
            raise ModelError(
                f"tensor {tensor.name!r} needs external data file {loc!r}, which {exc.reason}",
                where=str(path),
                hint="Point the model's external data at the .data file itself.",
            ) from None
        _check_extent(tensor.name, info, loc, size, path)


def _check_extent(name: str, info: dict[str, str], loc: str, size: int, path: Path) -> None:
    """The tensor's offset and length lie inside its external data file of ``size`` bytes.

    A truncated .data file or a length past its end is the model's fault: said here with
    the tensor and the sizes, before onnx reads it (onnx raises a bare ValueError).
    """
    try:
        offset = int(info.get("offset") or 0)
        length = int(info["length"]) if info.get("length") else None
    except ValueError:
        raise ModelError(
            f"tensor {name!r}: external data offset/length are not integers "
            f"({info.get('offset')!r}, {info.get('length')!r})",
            where=str(path),
            hint="Re-export the model with its external data.",
        ) from None
    end = offset + (length if length is not None else 0)
    if offset < 0 or (length is not None and length < 0) or end > size or offset > size:
        want = f"bytes {offset}..{end}" if length is not None else f"offset {offset}"
        raise ModelError(
            f"tensor {name!r} needs {want} of external data file {loc!r}, which has {size} "
            "bytes (truncated, or the model points past its end)",
            where=str(path),
            hint="Copy the complete .data file next to the model (or re-export it).",
        )


def load_model(path: Path, limits: Limits | None = None) -> onnx.ModelProto:
    """Load and structurally check an ONNX file, with one-line errors.

    Its node count and subgraph nesting are checked against ``limits`` (the host's
    defaults when None) right after parsing, before any other work on it."""
    path = Path(path)
    try:
        data = read_bounded(path, MAX_MODEL_BYTES)
    except FileNotFoundError:
        raise ModelError(
            "model file not found",
            where=str(path),
            hint="Check the 'source' path (relative to the suite file).",
        ) from None
    except BoundedReadError as exc:
        raise ModelError(
            exc.reason, where=str(path), hint="Point 'source' at an .onnx file."
        ) from None
    except OSError as exc:
        raise ModelError(f"cannot read model: {describe_os_error(exc)}", where=str(path)) from None
    if not data:
        raise ModelError("is empty, not an ONNX model", where=str(path))
    try:
        model = onnx.load_from_string(data)
    except (DecodeError, ValueError, RuntimeError) as exc:
        raise ModelError(
            f"is not a valid ONNX model (truncated or not ONNX: {exc})",
            where=str(path),
            hint="Re-export or re-download the model.",
        ) from None
    if not model.HasField("graph") or not model.graph.node:
        raise ModelError(
            "is not a valid ONNX model (no graph or no nodes; truncated or not ONNX?)",
            where=str(path),
            hint="Re-export the model.",
        )
    check_graph(model, limits or default_limits(), str(path))
    _check_external_data(model, path)
    if any(
        t.data_location == onnx.TensorProto.EXTERNAL
        for t in external_data_helper._get_all_tensors(model)
    ):
        try:
            external_data_helper.load_external_data_for_model(model, str(path.parent))
        except (OSError, ValueError) as exc:  # changed between the check and the read
            raise ModelError(
                f"cannot load its external data: {str(exc).splitlines()[0][:200]}",
                where=str(path),
                hint="Copy the complete .data file next to the model.",
            ) from None
    prepare.toposort(model.graph, str(path))  # a cycle is a ModelError naming its nodes
    try:
        onnx.checker.check_model(model)
    except onnx.checker.ValidationError as exc:
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else "invalid"
        raise ModelError(
            f"fails the ONNX checker: {first}",
            where=str(path),
            hint="Fix the model or re-export it.",
        ) from None
    return model


def _feedable_dtype(elem_type: int, name: str, where: str | None) -> np.dtype:
    if elem_type not in _FEEDABLE:
        type_name = (
            onnx.TensorProto.DataType.Name(elem_type)
            if elem_type in onnx.TensorProto.DataType.values()
            else str(elem_type)
        )
        raise ModelError(
            f"input {name!r} has element type {type_name}; guard can feed float, integer "
            "and bool inputs only",
            where=where,
            hint="Declare the input's elem_type in the model (re-export it).",
        )
    return np.dtype(onnx.helper.tensor_dtype_to_np_dtype(elem_type))


def graph_inputs(model: onnx.ModelProto, where: str | None = None) -> list[GraphInput]:
    """Real data inputs (IR<4 lists initializers as inputs too: skip those), of a dtype
    guard can make data for."""
    return prepare.graph_inputs(model, lambda t, name: _feedable_dtype(t, name, where), where)


def opset_of(model: onnx.ModelProto) -> int:
    for o in model.opset_import:
        if o.domain in ("", "ai.onnx"):
            return int(o.version)
    return 0


def _by_name(
    specs: dict[str, InputSpec], inputs: list[GraphInput] | tuple[GraphInput, ...], where: str
) -> dict[str, InputSpec]:
    """The specs keyed by input name: a test_data file ``#K`` (an unnamed input_K.pb) is
    the model's K-th input."""
    out: dict[str, InputSpec] = {}
    for k, s in specs.items():
        if k.startswith("#") and k[1:].isdigit():
            pos = int(k[1:])
            if pos >= len(inputs):
                raise ModelError(
                    f"test_data: {Path(s.file or k).name} has no input at position {pos} "
                    f"(the model has {len(inputs)} inputs)",
                    where=where,
                )
            k = inputs[pos].name
        out.setdefault(k, s)
    return out


def _file_array(s: InputSpec, gi: GraphInput, where: str) -> np.ndarray:
    """A file input's array, checked against the model's input (dtype, rank, fixed dims)."""
    arr = data.read_input(str(s.file), s.key, gi.name)
    at = f"{s.file}" + (f" (key {s.key!r})" if s.key else "")
    return data.check_array(arr, gi.name, gi.dtype, tuple(gi.dims) if gi.ranked else (), at)


def bind(
    model: onnx.ModelProto,
    path: Path,
    specs: dict[str, InputSpec],
    where: str,
    limits: Limits | None = None,
) -> ModelSpec:
    """Bind every input's dims from the suite; an unbound dynamic dim is an error.

    An input read from a file is bound to the file's shape. Every input, and every output
    whose declared dims are known once the inputs are bound, must fit
    ``limits.max_tensor_bytes`` (guard.suite.limits): checked before anything is built."""
    limits = limits or default_limits()
    inputs = graph_inputs(model, where)
    specs = _by_name(specs, inputs, where)
    given = {k: spec.shape for k, spec in specs.items()}
    for gi in inputs:
        s = specs.get(gi.name)
        if s is not None and s.file:
            given[gi.name] = _file_array(s, gi, where).shape
    shapes, bound_notes = prepare.bind_shapes(inputs, given, where)
    notes = [f"{path}: {n}" for n in bound_notes]
    for gi in inputs:
        shape = shapes[gi.name]
        if 0 in shape:
            ax = shape.index(0)
            raise ModelError(
                f"input {gi.name!r} with shape {list(shape)} is empty (dim {ax} is 0): there "
                "is nothing to run or compare",
                where=where,
                hint="Give every dim of the input a size of at least 1 in the suite's inputs "
                "block.",
            )
        check_tensor_bytes("input", gi.name, shape, gi.dtype.itemsize, limits, where)
    _check_outputs(model, inputs, shapes, limits, where)
    sha256 = file_sha256(path)
    for note in notes:  # once per model and note, not on every command that binds it
        note_once(sha256, note)
    return ModelSpec(
        path=path,
        sha256=sha256,
        opset=opset_of(model),
        ir_version=int(model.ir_version),
        inputs=tuple(inputs),
        shapes=shapes,
        outputs=tuple(o.name for o in model.graph.output),
        notes=tuple(notes),
    )


def _check_outputs(
    model: onnx.ModelProto,
    inputs: list[GraphInput],
    shapes: dict[str, tuple[int, ...]],
    limits: Limits,
    where: str,
) -> None:
    """Each graph output's declared size, its symbolic dims taken from the bound inputs'
    (an output with a dim nothing binds is left to the run)."""
    symbols: dict[str, int] = {}
    for gi in inputs:
        for d, v in zip(gi.dims, shapes[gi.name], strict=False):
            if isinstance(d, str) and d:
                symbols[d] = v
    for out in model.graph.output:
        tt = out.type.tensor_type
        if not out.type.HasField("tensor_type") or not tt.HasField("shape"):
            continue
        try:
            itemsize = np.dtype(onnx.helper.tensor_dtype_to_np_dtype(tt.elem_type)).itemsize
        except (KeyError, TypeError, ValueError):
            continue  # an element type numpy has no size for: the checker or the run says
        shape = []
        for dim in tt.shape.dim:
            if dim.HasField("dim_value") and dim.dim_value > 0:
                shape.append(int(dim.dim_value))
            elif dim.HasField("dim_param") and dim.dim_param in symbols:
                shape.append(symbols[dim.dim_param])
            else:
                break
        else:
            check_tensor_bytes("output", out.name, tuple(shape), itemsize, limits, where)


def make_inputs(spec: ModelSpec, specs: dict[str, InputSpec]) -> dict[str, np.ndarray]:
    """Deterministic input data from each input's seed and distribution (dtype from the model)."""
    feeds: dict[str, np.ndarray] = {}
    specs = _by_name(specs, spec.inputs, str(spec.path))
    for gi in spec.inputs:
        s = specs.get(gi.name) or InputSpec(gi.name, None)
        shape = spec.shapes[gi.name]
        if s.file:
            feeds[gi.name] = np.array(_file_array(s, gi, str(spec.path)), order="C")
            continue
        try:
            arr = _fill(s, shape, gi.dtype)
        except (OverflowError, ValueError) as exc:  # e.g. value 1000 for an int8 input
            raise ModelError(
                f"inputs.{gi.name}: cannot make {s.dist} data of dtype {gi.dtype} "
                f"({str(exc).splitlines()[0][:120]})",
                where=str(spec.path),
                hint="Give values that fit the input's dtype in the suite's inputs block.",
            ) from None
        # not ascontiguousarray: it turns a 0-d scalar input into shape (1,)
        feeds[gi.name] = np.array(arr, dtype=gi.dtype, order="C").reshape(shape)
    return feeds


def _fill(s: InputSpec, shape: tuple[int, ...], dt: np.dtype) -> np.ndarray:
    """The data of one input: its distribution, drawn from its seed, in its dtype."""
    rng = np.random.default_rng(s.seed)
    p = s.params
    if np.issubdtype(dt, np.integer):
        info = np.iinfo(dt)
        for k in ("value", "low", "high"):
            if k in p and not info.min <= p[k] <= info.max:
                # numpy would wrap it silently (1000 -> -24 in int8): a wrong input, not data.
                raise ValueError(f"{k} {p[k]:g} is outside {dt}'s range [{info.min}, {info.max}]")
    if s.dist == "zeros":
        arr = np.zeros(shape, dtype=dt)
    elif s.dist == "ones":
        arr = np.ones(shape, dtype=dt)
    elif s.dist == "const":
        arr = np.full(shape, p["value"], dtype=dt)
    elif dt == np.bool_:
        arr = rng.random(shape) < 0.5
    elif s.dist == "uniform":
        low, high = p.get("low", 0.0), p.get("high", 1.0)
        if np.issubdtype(dt, np.integer):
            arr = rng.integers(int(low), int(high), size=shape, endpoint=True).astype(dt)
        else:
            arr = rng.uniform(low, high, size=shape).astype(dt)
    else:  # normal
        mean, std = p.get("mean", 0.0), p.get("std", 1.0)
        if np.issubdtype(dt, np.integer):
            # Integer inputs (token ids, indices) from a normal draw make little sense;
            # give small non-negative integers unless the suite says otherwise.
            arr = np.abs(np.rint(rng.normal(mean, std, size=shape))).astype(dt)
        else:
            arr = rng.normal(mean, std, size=shape).astype(dt)
    return arr
