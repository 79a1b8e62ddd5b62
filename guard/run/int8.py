"""The int8 row of a model with ``quantize:``: build its QDQ model, and judge it against fp32.

``int8_model_path`` turns the fp32 source into the int8 model guard.quantize writes,
cached under guard's cache root (``$GUARD_CACHE/int8``): the profile by (source sha256,
calibration sha256), reused while the compiler's fp32 passes are the same; the model by
(profile sha256, the block's options, the writer's version). A changed calibration set is
a new profile hash, so a new model hash, and both show in the manifest's ``quantization``
pins (``int8_pins``).

``quantization_block`` is the result's ``quantization`` record for one backend: the int8
session's outputs against the fp32 source's (onnxruntime, the golden producer) on the same
inputs: the suite's inputs and ``EVAL_SEEDS`` more draws of them (seeds moved by 1000 + k,
away from the ``calibration: inputs`` seeds), plus the ``accuracy`` dataset's rows when one
is given. ``top1_agreement`` and ``sqnr_db`` come from this backend's own outputs;
``worst_tensors`` from guard.quantize.sqnr on the reference interpreter (the model's own
error, computed once per model and inputs).
"""

from __future__ import annotations

import functools
import hashlib
from collections.abc import Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any, NotRequired, TypedDict, cast

import numpy as np
import onnx

from guard.checks.assemble import ResultJson
from guard.checks.evaluate import Check, verdict
from guard.core.errors import ModelError
from guard.core.fsutil import file_sha256
from guard.core.json_types import JsonObject
from guard.core.user_cache import cache_root
from guard.manifest.written import QuantizationPins
from guard.quantize import (
    QuantOptions,
    TensorError,
    outputs_sqnr,
    tensor_errors,
    top1_agreement,
)
from guard.quantize.build import kept_model_path
from guard.quantize.calibration import Calibration, read_calibration, seeded_samples
from guard.results.result import Check as ResultCheck
from guard.results.result import Quantization, Result
from guard.suite import InputSpec, ModelEntry
from guard.suite.model import ModelSpec, bind, graph_inputs, load_model, make_inputs
from guard.suite.quantize import INPUT_SAMPLES

EVAL_SEEDS = 15
DATASET_ROWS = 200  # rows of the accuracy dataset the agreement reads at most
WORST_TENSORS = 5
ERROR_SAMPLES = 2  # samples the per-tensor report runs on the reference interpreter
META = "guard.quantize."


def _options(entry: ModelEntry) -> QuantOptions:
    q = entry.quantize
    assert q is not None
    return QuantOptions(q.method, q.per_channel, q.symmetric, q.keep_fp32)


def calibration_of(entry: ModelEntry, fp32_path: Path) -> Calibration:
    q = entry.quantize
    assert q is not None
    model = load_model(fp32_path, entry.limits)
    if q.calibration == "inputs":
        spec = bind(model, fp32_path, dict(entry.inputs), entry.where, entry.limits)
        return seeded_samples(spec, dict(entry.inputs), INPUT_SAMPLES, f"{entry.where} inputs")
    return read_calibration(Path(q.calibration), graph_inputs(model, str(fp32_path)))


def int8_model_path(entry: ModelEntry, fp32_path: Path) -> Path:
    """The cached QDQ model of ``entry``'s fp32 source (module doc)."""
    opts = _options(entry)
    source = file_sha256(fp32_path)
    cal = calibration_of(entry, fp32_path)
    try:
        return kept_model_path(
            fp32_path, cal, opts, source_sha256=source, root=cache_root() / "int8"
        )
    except ModelError as exc:
        raise ModelError(str(exc), where=f"{entry.where}.quantize") from None


@functools.lru_cache(maxsize=32)
def _meta(path: str, stamp: float) -> dict[str, str]:
    m = onnx.load(path, load_external_data=False)
    return {p.key[len(META) :]: p.value for p in m.metadata_props if p.key.startswith(META)}


def int8_pins(path: Path) -> QuantizationPins:
    """The manifest's ``quantization`` pins of an int8 model guard wrote (those of its
    metadata it holds)."""
    meta = _meta(str(path), path.stat().st_mtime)
    keys = ("source_sha256", "profile_sha256", "calibration_sha256", "method")
    return cast(QuantizationPins, {k: meta[k] for k in keys if k in meta})


class _Reference:
    """The fp32 source on onnxruntime (the golden producer), as a session."""

    def __init__(self, path: Path) -> None:
        from guard.backends.onnxruntime import reference_session

        self.sess = reference_session(path)

    def run(self, feeds: dict[str, np.ndarray]) -> list[np.ndarray]:
        return [np.asarray(o) for o in self.sess.run(None, feeds)]


def _eval_feeds(entry: ModelEntry, spec: ModelSpec, feeds: dict[str, np.ndarray]) -> list[dict]:
    """The suite's inputs, then ``EVAL_SEEDS`` more draws (an input read from a file, or
    named by test_data position, stays as it is)."""
    specs = dict(entry.inputs)
    for gi in spec.inputs:  # an input the suite leaves out is drawn with the default spec
        if gi.name not in specs and not any(k.startswith("#") for k in specs):
            specs[gi.name] = InputSpec(gi.name, None)
    out = [feeds]
    if any(not s.file for s in specs.values()):
        for k in range(EVAL_SEEDS):
            moved = {
                n: s if s.file else replace(s, seed=s.seed + 1000 + k) for n, s in specs.items()
            }
            out.append(make_inputs(spec, moved))
    return out


def _dataset_feeds(entry: ModelEntry, spec: ModelSpec) -> list[dict]:
    cfg = entry.checks.accuracy
    if cfg is None:
        return []
    from guard import zoo

    x, _ = zoo.load_dataset(cfg.dataset)
    name = spec.inputs[0].name
    batch = spec.shapes[name][0] if spec.shapes[name] else 1
    x = x[: min(len(x), int(cfg.limit or DATASET_ROWS), DATASET_ROWS)]
    n = len(x) - len(x) % batch
    dtype = spec.inputs[0].dtype
    return [{name: np.ascontiguousarray(x[i : i + batch], dtype=dtype)} for i in range(0, n, batch)]


_WORST: dict[tuple[str, str, str], list[TensorError]] = {}


def _worst(fp32: Path, int8: Path, samples: list[dict[str, np.ndarray]]) -> list[TensorError]:
    """The per-tensor report, once per (model pair, inputs) in a run (not per backend)."""
    h = hashlib.sha256()
    for f in samples:
        for name in sorted(f):
            h.update(name.encode() + np.ascontiguousarray(f[name]).tobytes())
    key = (str(fp32), file_sha256(int8), h.hexdigest())
    if key not in _WORST:
        errs = tensor_errors(onnx.load(str(fp32)), onnx.load(str(int8)), samples)
        _WORST[key] = [e for e in errs if not e.output]
    return _WORST[key]


class QuantizationJson(TypedDict):
    """An int8 result's ``quantization`` block as written (read as its Quantization record)."""

    source_sha256: str | None
    profile_sha256: str | None
    calibration_sha256: str | None
    method: str | None
    sqnr_db: float
    top1_agreement: float | None
    samples: int
    worst_tensors: list[JsonObject]  # WorstTensor records' JSON
    top1_fp32: NotRequired[float]
    top1_int8: NotRequired[float]
    top1_drop: NotRequired[float]


def quantization_block(
    entry: ModelEntry,
    spec: ModelSpec,
    session: Any,
    feeds: dict[str, np.ndarray],
    fp32_path: Path,
    accuracy: float | None,
) -> Quantization:
    """The result's ``quantization`` record for this backend's int8 session (module doc),
    read from the block as the result writes it."""
    ref = _Reference(fp32_path)
    evals = _eval_feeds(entry, spec, feeds) + _dataset_feeds(entry, spec)
    fp32_out = [ref.run(f) for f in evals]
    int8_out = [[np.asarray(o) for o in session.run(f)] for f in evals]
    pins = int8_pins(spec.path)
    worst = _worst(fp32_path, spec.path, evals[:ERROR_SAMPLES])
    block: QuantizationJson = {
        "source_sha256": pins.get("source_sha256"),
        "profile_sha256": pins.get("profile_sha256"),
        "calibration_sha256": pins.get("calibration_sha256"),
        "method": pins.get("method"),
        "sqnr_db": round(outputs_sqnr(fp32_out, int8_out), 2),
        "top1_agreement": top1_agreement(fp32_out, int8_out),
        "samples": len(evals),
        "worst_tensors": [e.to_json() for e in worst[:WORST_TENSORS]],
    }
    if accuracy is not None and entry.checks.accuracy is not None:
        from guard.golden.accuracy import session_accuracy

        fp32_spec = bind(load_model(fp32_path), fp32_path, dict(entry.inputs), entry.where)
        runs: Any = ref  # session_accuracy only calls run()
        fp32_acc, _ = session_accuracy(entry, runs, fp32_spec)
        block["top1_fp32"] = fp32_acc
        block["top1_int8"] = accuracy
        block["top1_drop"] = round(fp32_acc - accuracy, 6)
    return Quantization.from_json(block)


def _check(c: ResultCheck) -> Check:
    """A check of a result as the verdict reads it."""
    return Check(str(c.name), str(c.status), c.value, c.bound, str(c.message))


def add_int8_agreement(results: list[ResultJson], entries: Sequence[ModelEntry]) -> None:
    """The ``int8_agreement`` check on every int8 row whose model asks for it: the outputs of
    the rows of one (model, backend) on the ``across`` targets must be identical bytes."""
    from guard.compare.int8_outputs import DIFFER, IDENTICAL, agreement

    wanted = {
        e.name: list(e.checks.int8_agreement.across)
        for e in entries
        if e.quantize is not None and e.checks.int8_agreement is not None
    }
    # (model, backend) -> target -> (the result read, the result as it will be written)
    groups: dict[tuple[str, str], dict[str, tuple[Result, ResultJson]]] = {}
    for raw in results:
        r = Result.of(raw)
        if r.model in wanted and r.target in wanted[r.model]:
            groups.setdefault((r.model, r.backend), {})[r.target] = (r, raw)
    for (model, _backend), by_target in groups.items():
        across = wanted[model]
        missing = [
            t for t in across if t not in by_target or by_target[t][0].verdict in (None, "error")
        ]
        first = by_target.get(across[0])
        if missing or first is None:
            status, msg = "skipped", f"no int8 outputs on {', '.join(missing)} to compare"
        else:
            status, msg = "pass", f"int8 outputs identical across {', '.join(across)}"
            for t in across[1:]:
                v, name = agreement(first[0], by_target[t][0])
                if v != IDENTICAL:
                    status = "fail"
                    msg = f"int8 outputs {DIFFER if v == DIFFER else v} between {across[0]} and {t}"
                    msg += f": first differing tensor {name}" if name else ""
                    break
        check = Check("int8_agreement", status, None, None, msg)
        for r, raw in by_target.values():
            raw["checks"] = [*(c.to_json() for c in r.checks), dict(check.to_dict())]
            if r.verdict != "error":
                raw["verdict"] = verdict([*map(_check, r.checks), check])
