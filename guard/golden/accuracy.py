"""Held-out accuracy of a loaded session: top-1 over a zoo dataset, whole batches."""

from __future__ import annotations

import numpy as np

from guard.backends.base import Session
from guard.core.errors import GuardError, ModelError
from guard.golden.numerics import top1_accuracy
from guard.suite import ModelEntry
from guard.suite.model import ModelSpec


def session_accuracy(entry: ModelEntry, session: Session, spec: ModelSpec) -> tuple[float, int]:
    """Top-1 accuracy of ``session`` on the entry's ``checks.accuracy`` dataset, and n."""
    from guard import zoo  # datasets live with the zoo: only when an accuracy check asks

    cfg = entry.checks.accuracy
    if cfg is None:
        raise KeyError("accuracy")  # called only for an entry with checks.accuracy
    try:
        x, y = zoo.load_dataset(cfg.dataset)
    except GuardError as exc:
        raise ModelError(str(exc), where=f"{entry.where}.checks.accuracy.dataset") from None
    limit = cfg.limit
    if limit:
        x, y = x[:limit], y[:limit]
    name = spec.inputs[0].name
    batch = spec.shapes[name][0] if spec.shapes[name] else 1
    if tuple(x.shape[1:]) != tuple(spec.shapes[name][1:]):
        raise ModelError(
            f"dataset {cfg.dataset} samples have shape {list(x.shape[1:])}, "
            f"input {name!r} wants {list(spec.shapes[name][1:])}",
            where=f"{entry.where}.checks.accuracy",
        )
    dtype = spec.inputs[0].dtype
    preds = []
    n = len(x) - len(x) % batch  # whole batches only: the artefact's shapes are static
    feeds = [
        {name: np.ascontiguousarray(x[i : i + batch], dtype=dtype)} for i in range(0, n, batch)
    ]
    run_many = getattr(session, "run_many", None)  # emulated: one emulator start, not n
    outs = run_many(feeds) if run_many is not None else [session.run(f) for f in feeds]
    for out in outs:
        preds.append(np.asarray(out[0]).reshape(batch, -1))
    logits = np.concatenate(preds) if preds else np.zeros((0, 1))
    return top1_accuracy(logits, y[:n]), n
