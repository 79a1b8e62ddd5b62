"""What the tvm backend and its tuning share: the host's cores, TVM's target, the import.

Building (guard.backends.tvm) and tuning (guard.backends.tvm_tuning) must see the same
relax module for the same target, or tuning-task keys would not match: both take the
target and the imported module from here. tvm itself is imported inside the functions
(it is heavy): importing this module never imports tvm.
"""

from __future__ import annotations

import os
import warnings
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np
import onnx
from onnx import helper

from guard.core.errors import ModelError, UnsupportedOpError
from guard.manifest.target_string import to_tvm_dict

if TYPE_CHECKING:
    import tvm


def host_cores() -> int:
    """The cores this process may run on (its affinity), which TVM sizes its pool by."""
    try:
        return len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        return os.cpu_count() or 1


def tvm_target(canonical: str, num_cores: int | None = None) -> tvm.target.Target:
    """TVM's Target for a canonical target string, ``num-cores`` added when given and unset."""
    import tvm

    d = dict(to_tvm_dict(canonical))
    if num_cores is not None and "num-cores" not in d:
        d["num-cores"] = int(num_cores)
    try:
        return tvm.target.Target(d)
    except Exception as exc:  # noqa: BLE001
        first = (str(exc).strip().splitlines() or [repr(exc)])[-1]
        raise ModelError(
            f"TVM refuses target {canonical!r}: {first}", hint="Check the suite's target spelling."
        ) from None


def graph_io(model: onnx.ModelProto) -> tuple[list[tuple[str, str]], list[str]]:
    """[(input name, numpy dtype)] of the real inputs (not initializers), output names."""
    inits = {i.name for i in model.graph.initializer}
    ins = [
        (i.name, np.dtype(helper.tensor_dtype_to_np_dtype(i.type.tensor_type.elem_type)).name)
        for i in model.graph.input
        if i.name not in inits
    ]
    return ins, [o.name for o in model.graph.output]


def import_onnx(model_path: Path, input_shapes: dict[str, tuple[int, ...]]) -> tvm.IRModule:
    """The relax module of an ONNX file with every input shape and dtype bound."""
    import tvm
    from tvm.relax.frontend.onnx import from_onnx

    try:
        model = onnx.load(str(model_path))
    except Exception as exc:  # noqa: BLE001
        raise ModelError(f"cannot load the ONNX model: {exc}", where=str(model_path)) from None
    ins, _ = graph_io(model)
    missing = [n for n, _ in ins if n not in input_shapes]
    if missing:
        raise ModelError(
            f"no bound shape for input(s) {missing}",
            where=str(model_path),
            hint="Bind every graph input's shape in the suite.",
        )
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # the frontend warns through the checker
            return from_onnx(
                model,
                shape_dict={n: list(input_shapes[n]) for n, _ in ins},
                dtype_dict=dict(ins),
                keep_params_in_input=False,
            )
    except tvm.error.OpNotImplemented as exc:
        text = " ".join(str(exc).split())
        raise UnsupportedOpError(
            f"TVM's relax ONNX frontend: {text}",
            where=str(model_path),
            hint="Replace the operator or use another backend.",
        ) from None
    except Exception as exc:  # noqa: BLE001
        first = (str(exc).strip().splitlines() or [repr(exc)])[-1]
        raise ModelError(
            f"TVM's relax ONNX frontend failed: {first}", where=str(model_path)
        ) from None
