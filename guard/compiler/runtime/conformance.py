"""The bundled compiler as an ``onnx.backend.base.Backend``, so onnx's backend test suite
(``onnx.backend.test.BackendTest``) runs against it.

``prepare`` keeps the model; the first ``run`` compiles it for the shapes it is given
(the IR is statically shaped), through ``import_onnx`` and the chosen pipeline (O2 by
default), verifies the result and runs it in the reference interpreter. A case whose
shape-like operand (Reshape's shape, Slice's starts, Resize's scales, ...) is a graph input
is specialised on the value the test feeds for it (the one the compiler names in its "depends
on tensor data" error), as a deployment compiler requires such operands to be constant;
``GuardBackendRep.specialised`` says when that happened.

:class:`GuardNativeBackend` runs the same cases through generated code: the compiled graph
is planned (partitions, schedule, arena) and its native partitions are JIT-compiled by
guard.compiler.codegen; nodes without an emitter run on the cpu fallback. Each rep
records whether every node ran as generated code (``all_native``).
"""

from __future__ import annotations

import re
from typing import Any

import numpy as np
import onnx
from onnx import numpy_helper
from onnx.backend.base import Backend, BackendRep

from guard.compiler import import_onnx, optimize, run_reference, verify
from guard.compiler.codegen.build import jit
from guard.compiler.codegen.llvm_target import host_target
from guard.compiler.ir.core import Graph
from guard.compiler.partition.plan import plan
from guard.core.errors import ModelError


def _bind_inputs_as_constants(
    model: onnx.ModelProto, names: list[str], values: list[np.ndarray]
) -> onnx.ModelProto:
    m = onnx.ModelProto()
    m.CopyFrom(model)
    for name, v in zip(names, values, strict=True):
        m.graph.initializer.append(numpy_helper.from_array(np.asarray(v), name))
    keep = [i for i in m.graph.input if i.name not in set(names)]
    del m.graph.input[:]
    m.graph.input.extend(keep)
    return m


class GuardBackendRep(BackendRep):
    native = False

    def __init__(self, model: onnx.ModelProto, pipeline: str) -> None:
        self.all_native = False
        self.model = model
        self.pipeline = pipeline
        inits = {i.name for i in model.graph.initializer}
        self.input_names = [i.name for i in model.graph.input if i.name not in inits]
        self.output_names = [o.name for o in model.graph.output]
        self.specialised = False
        self._cache: dict[tuple, Any] = {}

    def _compile(self, model: onnx.ModelProto, shapes: dict[str, tuple[int, ...]]) -> Graph:
        g = import_onnx(model, shapes)
        g2, _ = optimize(g, self.pipeline, target=host_target().table)  # it runs here
        verify(g2)
        return g2

    def run(self, inputs: Any, **kwargs: Any) -> tuple[np.ndarray, ...]:
        if isinstance(inputs, dict):
            arrays = [np.asarray(inputs[n]) for n in self.input_names]
        else:
            arrays = [
                np.asarray(x) for x in (inputs if isinstance(inputs, list | tuple) else [inputs])
            ]
        names = self.input_names[: len(arrays)]
        shapes = {n: tuple(a.shape) for n, a in zip(names, arrays, strict=True)}
        key = tuple(sorted(shapes.items()))
        graph = self._cache.get(key)
        feeds = dict(zip(names, arrays, strict=True))
        if graph is None:
            bound: list[str] = []
            model = self.model
            while True:
                try:
                    graph = self._compile(
                        model, {n: s for n, s in shapes.items() if n not in bound}
                    )
                    break
                except ModelError as exc:
                    # Specialise on the operand the compiler needs constant, if it is an input.
                    m = re.search(r"\('([^']*)'\) depends on tensor data", str(exc))
                    if not m:
                        raise
                    if m.group(1) in feeds and m.group(1) not in bound:
                        bound.append(m.group(1))
                    else:  # computed from inputs: bind the integer (shape-like) inputs
                        ints = [
                            n for n, a in feeds.items() if a.dtype.kind in "iu" and n not in bound
                        ]
                        if not ints:
                            raise
                        bound.extend(ints)
                    model = _bind_inputs_as_constants(self.model, bound, [feeds[n] for n in bound])
            if bound:
                self.specialised = True  # on these values: never reuse it for others
                out = self._execute(graph, {n: a for n, a in feeds.items() if n not in bound})
                return tuple(out[o] for o in self.output_names)
            self._cache[key] = graph
        out = self._execute(graph, feeds)
        return tuple(out[o] for o in self.output_names)

    def _execute(self, graph: Graph, feeds: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        if not self.native:
            return run_reference(graph, feeds)

        compiled = plan(graph)
        self.all_native = compiled.partition_report["fallback_nodes"] == 0
        rt, _ = jit(compiled)
        return rt.run(feeds)


class GuardNativeRep(GuardBackendRep):
    native = True


class GuardBackend(Backend):
    """onnx backend API over guard's compiler; ``pipeline`` defaults to O2."""

    pipeline = "O2"

    @classmethod
    def is_compatible(cls, model: onnx.ModelProto, device: str = "CPU", **kwargs: Any) -> bool:
        return device == "CPU"

    @classmethod
    def prepare(cls, model: onnx.ModelProto, device: str = "CPU", **kwargs: Any) -> GuardBackendRep:
        super().prepare(model, device, **kwargs)
        return GuardBackendRep(model, kwargs.get("pipeline", cls.pipeline))

    @classmethod
    def run_model(
        cls, model: onnx.ModelProto, inputs: Any, device: str = "CPU", **kwargs: Any
    ) -> tuple[np.ndarray, ...]:
        return cls.prepare(model, device, **kwargs).run(inputs)

    @classmethod
    def supports_device(cls, device: str) -> bool:
        return device == "CPU"


class GuardNativeBackend(GuardBackend):
    """The conformance cases through generated code (guard.compiler.codegen)."""

    @classmethod
    def prepare(cls, model: onnx.ModelProto, device: str = "CPU", **kwargs: Any) -> GuardBackendRep:
        Backend.prepare(model, device, **kwargs)
        rep = GuardNativeRep(model, kwargs.get("pipeline", cls.pipeline))
        cls.reps.append(rep)
        return rep

    reps: list[GuardBackendRep] = []
