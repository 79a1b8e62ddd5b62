"""Golden production: the reference outputs a model's fixed inputs must reproduce.

``ensure_golden`` loads a model's golden, or creates it from the reference producer
(onnxruntime with every graph optimisation off), or updates it with a reason. ``guard run``
and ``guard golden update`` both come here; neither needs the run orchestrator.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np

from guard.core.errors import ModelError
from guard.core.isolate import run_isolated
from guard.golden.store import Golden, GoldenStore
from guard.suite import ModelEntry, Suite
from guard.suite.model import ModelSpec, make_inputs


def golden_store(suite: Suite, root: Path | None = None) -> GoldenStore:
    """The suite's golden store: ``root``, or ``<suite dir>/goldens/<suite>``."""
    return GoldenStore(root if root is not None else suite.directory / "goldens" / suite.name)


def reference_outputs(
    path: Path, feeds: dict[str, np.ndarray]
) -> tuple[list[np.ndarray], dict[str, Any]]:
    """The golden producer: onnxruntime with every graph optimisation off."""
    # onnxruntime is a heavy backend: imported only when a golden is produced.
    import onnxruntime

    from guard.backends.onnxruntime import reference_session

    sess = reference_session(path)
    try:
        outs = sess.run(None, feeds)
    except Exception as exc:  # noqa: BLE001 - onnxruntime raises its own untyped errors
        # The model cannot run on the suite's inputs (a value its control flow rejects, a
        # shape its reshapes cannot take): a problem with the suite, named as ORT names it.
        raise ModelError(
            "the golden reference (onnxruntime, optimisations off) could not run the model "
            f"on the suite's inputs: {' '.join(str(exc).split())}",
            where=str(path),
            hint="Check the values of the model's inputs in the suite (e.g. inputs: {sr: "
            "{shape: [], dist: const, value: 16000}}).",
        ) from None
    producer = {
        "name": "onnxruntime",
        "version": onnxruntime.__version__,
        "graph_optimization_level": "disabled",
        "threads": 1,
        "providers": sess.get_providers(),
    }
    return [np.asarray(o) for o in outs], producer


def ensure_golden(
    store: GoldenStore,
    entry: ModelEntry,
    spec: ModelSpec,
    path: Path,
    *,
    update_reason: str | None = None,
) -> tuple[Golden, str]:
    """Load the model's golden, or create it (status "created"), or update it with a reason."""
    if update_reason is None:
        existing = store.load(entry.name)
    else:
        # An update replaces a corrupt golden (its history is lost with it): the hint of
        # the corrupt-golden error sends the user here.
        existing, _ = store.load_replaceable(entry.name)
    if existing is not None and update_reason is None:
        for name, shape in spec.shapes.items():
            got = existing.inputs.get(name)
            if got is None or tuple(got.shape) != tuple(shape):
                raise ModelError(
                    f"golden inputs do not match the model's bound inputs ({name}: golden "
                    f"{None if got is None else list(got.shape)}, suite {list(shape)})",
                    where=entry.where,
                    hint=f"Run: guard golden update <suite> --model {entry.name} --reason '...'.",
                )
        return existing, "compared"
    feeds = make_inputs(spec, dict(entry.inputs))
    # onnxruntime's session creation on the user's model is native code that a malformed
    # model can crash: in a child, so a crash is this model's error, not the run's end.
    outs, producer = run_isolated(
        reference_outputs,
        path,
        feeds,
        what=f"the golden reference run (onnxruntime) of {entry.name}",
        where=entry.where,
        timeout_s=entry.build_timeout_s,
    )
    named = dict(zip(spec.outputs, outs, strict=True))
    golden = store.save(
        entry.name,
        feeds,
        named,
        producer=producer,
        model_sha256=spec.sha256,
        reason=update_reason,
        previous=existing,
    )
    return golden, ("updated" if existing is not None else "created")
