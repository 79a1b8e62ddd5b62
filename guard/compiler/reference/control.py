"""If and Loop: the host's part of control flow, over any way of running a body.

``run_if`` and ``run_loop`` take the node's inputs and attributes (see
guard.compiler.frontend.ops_control for the IR form) and ``run_body(body, inputs)``, which
runs one branch or loop body and returns its outputs in order: the reference interpreter
passes one that interprets the body's IR graph, the bundled runtime one that calls the
body's own compiled artefact. The semantics live here once, for both.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from guard.compiler.ir.core import dtype_from_name
from guard.compiler.reference.base import Attrs, Xs, arg
from guard.core.errors import ModelError

RunBody = Callable[[Any, list[np.ndarray]], list[np.ndarray]]


def run_if(xs: Xs, a: Attrs, run_body: RunBody) -> list[np.ndarray]:
    cond = bool(np.asarray(arg(xs)).reshape(-1)[0])
    captures = [arg(xs, i) for i in range(1, len(xs))]
    attr = "then_branch" if cond else "else_branch"
    if attr not in a:  # a specialisation the build refused (guard.compiler.frontend.specialise)
        why = a.get("specialised", {}).get("refused", {}).get(attr, "it was not compiled")
        raise ModelError(
            f"the If's condition is {cond} at run time, and its {attr} cannot run at the "
            f"input shapes this model was built for: {why}",
            hint="Build for the input shapes that branch needs (e.g. its window length).",
        )
    return run_body(a[attr], captures)


def run_loop(xs: Xs, a: Attrs, run_body: RunBody) -> list[np.ndarray]:
    n_carried = int(a["carried"])
    trip = xs[0]
    limit = int(np.asarray(trip).reshape(-1)[0]) if trip is not None else None
    cond = True if xs[1] is None else bool(np.asarray(xs[1]).reshape(-1)[0])
    carried = [arg(xs, 2 + k) for k in range(n_carried)]
    captures = [arg(xs, i) for i in range(2 + n_carried, len(xs))]
    scans: list[list[np.ndarray]] = []
    i = 0
    while cond and (limit is None or i < limit):
        outs = run_body(a["body"], [np.array(i, np.int64), np.array(cond), *carried, *captures])
        cond = bool(np.asarray(outs[0]).reshape(-1)[0])
        carried = [np.asarray(o) for o in outs[1 : 1 + n_carried]]
        scans.append([np.asarray(o) for o in outs[1 + n_carried :]])
        i += 1
    if len(scans) != int(a["scan_length"]) and a["scan"]:
        raise ModelError(
            f"the Loop ran {len(scans)} iterations; its scan outputs were planned for "
            f"{a['scan_length']}",
            hint="The bundled compiler needs the iteration count fixed at build time; run this "
            "model with onnxruntime.",
        )
    stacked = [
        np.stack([s[k] for s in scans]) if scans else np.zeros((0, *shape), dtype_from_name(dt))
        for k, (dt, shape) in enumerate(a["scan"])
    ]
    return [*carried, *stacked]
