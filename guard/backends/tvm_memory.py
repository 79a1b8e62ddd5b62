"""Memory figures for the tvm backend: TVM's static plan, and an ONNX liveness lower bound.

``planned_storage`` reads a relax module right after ``StaticPlanBlockMemory``: every
``relax.memory.alloc_storage`` with a constant size is one planned block that tensors of
disjoint lifetimes share; graph outputs are not planned (``relax.builtin.alloc_tensor``).
``onnx_liveness`` is the peak, over the ONNX graph's node order, of live intermediate and
output bytes, sizes from ONNX shape inference with the inputs bound. TVM fuses nodes, so
its plan can be below that bound: it bounds an unfused executor, not TVM.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np


def planned_storage(mod: Any) -> dict[str, int]:
    """Bytes of the ``alloc_storage`` calls StaticPlanBlockMemory left, and of output tensors."""
    import tvm
    from tvm import relax

    storage = {
        "storage_bytes": 0,
        "storages": 0,
        "dynamic_storages": 0,
        "unplanned_tensor_bytes": 0,
    }

    @relax.expr_functor.visitor
    class _Visit(relax.PyExprVisitor):
        def visit_call_(self, call: Any) -> None:  # noqa: N802 - TVM's visitor naming
            op = call.op
            if isinstance(op, tvm.ir.Op) and op.name == "relax.memory.alloc_storage":
                size = call.args[0]
                vals = list(size.values) if isinstance(size, relax.ShapeExpr) else []
                if len(vals) == 1 and isinstance(vals[0], tvm.tirx.IntImm):
                    storage["storage_bytes"] += int(vals[0].value)
                    storage["storages"] += 1
                else:
                    storage["dynamic_storages"] += 1
            elif isinstance(op, tvm.ir.Op) and op.name == "relax.builtin.alloc_tensor":
                shape, dtype = call.args[0], call.args[1]
                vals = list(shape.values) if isinstance(shape, relax.ShapeExpr) else []
                if vals and all(isinstance(v, tvm.tirx.IntImm) for v in vals):
                    n = int(np.prod([int(v.value) for v in vals]))
                    item = np.dtype(str(getattr(dtype, "value", dtype))).itemsize
                    storage["unplanned_tensor_bytes"] += n * item
            for a in call.args:
                self.visit_expr(a)

    for _, func in mod.functions.items():
        if isinstance(func, relax.Function):
            _Visit().visit_expr(func)
    return storage


def onnx_liveness(model_path: Path, input_shapes: dict[str, tuple[int, ...]]) -> dict[str, int]:
    """Peak live bytes of the ONNX graph's intermediate tensors in graph order."""
    import onnx
    from onnx import helper, shape_inference

    model = onnx.load(str(model_path))
    for i in model.graph.input:
        if i.name in input_shapes:
            dims = i.type.tensor_type.shape.dim
            for d, v in zip(dims, input_shapes[i.name], strict=False):
                d.ClearField("dim_param")
                d.dim_value = int(v)
    try:
        inferred = shape_inference.infer_shapes(model, data_prop=True)
    except Exception:  # noqa: BLE001 - a model shape inference cannot follow: no bound
        return {"lower_bound_bytes": -1, "unknown_tensors": -1}
    sizes: dict[str, int] = {}
    unknown = 0
    for vi in list(inferred.graph.value_info) + list(inferred.graph.output):
        tt = vi.type.tensor_type
        dims = [d.dim_value if d.HasField("dim_value") else None for d in tt.shape.dim]
        if not tt.HasField("shape") or any(d is None for d in dims) or not tt.elem_type:
            continue
        item = np.dtype(helper.tensor_dtype_to_np_dtype(tt.elem_type)).itemsize
        sizes[vi.name] = int(np.prod(dims, dtype=np.int64)) * item
    nodes = list(inferred.graph.node)
    outputs = {o.name for o in inferred.graph.output}
    last: dict[str, int] = {}
    for step, n in enumerate(nodes):
        for x in n.input:
            last[x] = step
    live = peak = 0
    frees: dict[int, int] = {}
    for step, n in enumerate(nodes):
        for o in n.output:
            if not o:
                continue
            if o not in sizes:
                unknown += 1
                continue
            live += sizes[o]
            if o not in outputs:
                end = last.get(o, step)
                frees[end] = frees.get(end, 0) + sizes[o]
        peak = max(peak, live)
        live -= frees.pop(step, 0)
    return {"lower_bound_bytes": peak, "unknown_tensors": unknown}
