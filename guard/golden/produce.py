"""Golden production: the reference outputs a model's fixed inputs must reproduce.

``ensure_golden`` loads a model's golden, or creates it from the reference producer
(onnxruntime with every graph optimisation off), or updates it with a reason. ``guard run``
and ``guard golden update`` both come here; neither needs the run orchestrator.
"""

from __future__ import annotations

import dataclasses
import shlex
from pathlib import Path

import numpy as np

from guard.core.errors import ModelError
from guard.core.isolate import run_isolated
from guard.golden.meta import InputSpecRecord, Producer
from guard.golden.numerics import NumericsJson
from guard.golden.store import Golden, GoldenStore, array_sha256
from guard.suite import ModelEntry, Suite
from guard.suite.model import ModelSpec, make_inputs


def golden_store(suite: Suite, root: Path | None = None) -> GoldenStore:
    """The suite's golden store: ``root``, or ``<suite dir>/goldens/<suite>``."""
    return GoldenStore(root if root is not None else suite.directory / "goldens" / suite.name)


def reference_outputs(
    path: Path, feeds: dict[str, np.ndarray]
) -> tuple[list[np.ndarray], Producer]:
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
    producer: Producer = {
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
        existing = store.load(entry.name, max_bytes=entry.limits.max_tensor_bytes)
    else:
        # An update replaces a corrupt golden (its history is lost with it): the hint of
        # the corrupt-golden error sends the user here.
        existing, _ = store.load_replaceable(entry.name)
    # The inputs are derived from the suite on every run: a changed seed, distribution,
    # shape or data file is seen, never answered with the golden's old inputs.
    feeds = make_inputs(spec, dict(entry.inputs))
    if existing is not None and update_reason is None:
        changes = input_changes(existing, feeds, input_specs(entry))
        if not changes:
            return existing, "compared"
        # Stale: the golden's outputs belong to other inputs. This run is checked against
        # the reference on the new inputs; storing them is `guard golden update`'s, with a
        # reason (the result asks for it).
        outs, _ = _reference(path, feeds, entry)
        named = dict(zip(spec.outputs, outs, strict=True))
        meta = dataclasses.replace(existing.meta, stale="; ".join(changes))
        return Golden(entry.name, feeds, named, meta=meta), "stale"
    outs, producer = _reference(path, feeds, entry)
    named = dict(zip(spec.outputs, outs, strict=True))
    golden = store.save(
        entry.name,
        feeds,
        named,
        producer=producer,
        model_sha256=spec.sha256,
        reason=update_reason,
        previous=existing,
        input_specs=input_specs(entry),
    )
    return golden, ("updated" if existing is not None else "created")


def _reference(
    path: Path, feeds: dict[str, np.ndarray], entry: ModelEntry
) -> tuple[list[np.ndarray], Producer]:
    # onnxruntime's session creation on the user's model is native code that a malformed
    # model can crash: in a child, so a crash is this model's error, not the run's end.
    return run_isolated(
        reference_outputs,
        path,
        feeds,
        what=f"the golden reference run (onnxruntime) of {entry.name}",
        where=entry.where,
        timeout_s=entry.build_timeout_s,
    )


def input_specs(entry: ModelEntry) -> dict[str, InputSpecRecord]:
    """The suite's input specs as the golden records them (what its inputs were made from)."""
    out: dict[str, InputSpecRecord] = {}
    for name, s in sorted(entry.inputs.items()):
        d: InputSpecRecord = {"shape": None if s.shape is None else list(s.shape)}
        if s.file:
            d.update(file=s.file, key=s.key)
        else:
            d.update(dist=s.dist, seed=s.seed, **{k: s.params[k] for k in sorted(s.params)})
        out[name] = d
    return out


def input_changes(
    golden: Golden, feeds: dict[str, np.ndarray], specs: dict[str, InputSpecRecord]
) -> list[str]:
    """What differs between the golden's inputs and the ones the suite makes now, one item
    per input: the spec keys that changed (``x.seed 0 -> 1``) when the golden recorded its
    specs, else what the data show (shape, or the values)."""
    before = golden.meta.input_specs
    out = []
    for name, arr in feeds.items():
        old = golden.inputs.get(name)
        if old is not None and array_sha256(old) == array_sha256(arr):
            continue
        if isinstance(before, dict) and isinstance(before.get(name), dict):
            was, now = before[name], specs.get(name, {})
            keys = sorted(set(was) | set(now))
            diffs = [f"{name}.{k} {was.get(k)} -> {now.get(k)}" for k in keys
                     if was.get(k) != now.get(k)]  # fmt: skip
            if diffs:
                out.append(", ".join(diffs))
                continue
        if old is None:
            out.append(f"{name}: not among the golden's inputs")
        elif tuple(old.shape) != tuple(arr.shape):
            out.append(f"{name}.shape {list(old.shape)} -> {list(arr.shape)}")
        else:
            out.append(f"{name}: the data differ from the golden's (its spec or file changed)")
    return out


def stale_warning(entry: ModelEntry, numerics: NumericsJson) -> list[str]:
    """The line asking for ``guard golden update`` when the suite's inputs changed."""
    why = numerics.get("golden_stale")
    if not why:
        return []
    suite = entry.where.split(": ", 1)[0] or "SUITE"
    return [
        f"inputs changed since the golden was stored ({why}): checked against the reference "
        f"on the new inputs; store them with: guard golden update {suite} --model "
        f"{entry.name} --reason {shlex.quote('inputs changed: ' + why)}"
    ]
