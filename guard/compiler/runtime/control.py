"""The host side of control flow in the bundled runtime: If and Loop call compiled bodies.

An If or Loop node runs on the host (the fallback partition): the condition and the trip
count are evaluated there (guard.compiler.reference.control, the same semantics as the
reference interpreter) and each branch or loop body runs as its own compiled Runtime.
``subs`` maps a body to its Runtime: by ``id`` of the IR graph in the node's attributes
(a plan compiled in this process) or by the string the artefact wrote in its place.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np

from guard.compiler.ir.core import Attrs
from guard.compiler.reference import control
from guard.compiler.runtime.engine import Executor, Runtime, reference_executor


def body_key(body: Any) -> Any:
    return body if isinstance(body, str) else id(body)


def control_executor(subs: Mapping[Any, Runtime]) -> Executor:
    """The fallback executor, with If and Loop running their compiled bodies."""

    def run_body(body: Any, inputs: list[np.ndarray]) -> list[np.ndarray]:
        rt = subs[body_key(body)]
        outs = rt.run(dict(zip(rt.input_names, inputs, strict=True)))
        return [outs[o] for o in rt.output_names]

    def execute(op: str, inputs: list[np.ndarray | None], attrs: Attrs) -> list[np.ndarray]:
        if op == "If":
            return control.run_if(inputs, attrs, run_body)
        if op == "Loop":
            return control.run_loop(inputs, attrs, run_body)
        return reference_executor(op, inputs, attrs)

    return execute
