"""``quantize_model``: source model + calibration data -> checked QDQ model, profile, report.

The steps, each refusing bad input with one line (exit 2):

1. refuse a model that is already quantised (it holds Q/DQ or integer ops);
2. check the sample count against the method (``MIN_SAMPLES``): entropy with fewer
   samples than it needs is refused, percentile warns with the number;
3. profile (guard.quantize.profile), or reuse ``profile_path`` when it was made from this
   model and this data: a profile of another model is refused naming both hashes, one of
   other data is replaced (the caller is told);
4. write the QDQ model (guard.quantize.qdq) and check it with onnx.checker;
5. the per-tensor error report on up to ``report_samples`` samples (guard.quantize.sqnr).
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import onnx

from guard.core.errors import InternalError, ModelError, UsageError
from guard.core.fsutil import sources_sha256
from guard.quantize.calibration import Calibration
from guard.quantize.profile import Profile, fp32_entries, pass_names, profile_model
from guard.quantize.qdq import QdqPlan, QuantOptions, already_quantized, write_qdq
from guard.quantize.ranges import METHODS, MIN_SAMPLES
from guard.quantize.sqnr import TensorError, tensor_errors

REPORT_SAMPLES = 16
WRITER_VERSION = "1"  # bump when the QDQ model written from one profile changes (cache key)
QUANTIZE_ROOT = Path(__file__).resolve().parent


def model_cache_path(root: Path, profile_sha256: str, opts: QuantOptions) -> Path:
    """Where guard keeps the QDQ model one profile and these options make (guard run's int8
    rows, guard fit's int8 rung): ``root/models/<profile>-<key>.onnx``, the key over the
    options, ``WRITER_VERSION`` and the sha256 of guard.quantize's sources (the writer
    changed without a version bump is another key, never a stale model)."""
    parts = [opts.__dict__, WRITER_VERSION, sources_sha256(QUANTIZE_ROOT)]
    key = hashlib.sha256(json.dumps(parts, sort_keys=True, default=list).encode()).hexdigest()
    return root / "models" / f"{profile_sha256[:16]}-{key[:12]}.onnx"


@dataclass
class Quantized:
    model: onnx.ModelProto
    profile: Profile
    plan: QdqPlan
    errors: list[TensorError]
    source_sha256: str
    notes: list[str] = field(default_factory=list)  # one line each: reuse, re-profiling
    warnings: list[str] = field(default_factory=list)

    @property
    def profile_sha256(self) -> str:
        return self.profile.sha256

    @property
    def worst(self) -> list[TensorError]:
        return [e for e in self.errors if not e.output]

    @property
    def output_sqnr_db(self) -> float | None:
        outs = [e.sqnr_db for e in self.errors if e.output]
        return min(outs) if outs else None


def check_samples(method: str, n: int, where: str) -> str | None:
    """None, a warning (too few for a good answer), or UsageError (too few to answer)."""
    if method not in METHODS:
        raise UsageError(f"unknown method {method!r}", hint=f"Use one of: {', '.join(METHODS)}.")
    need = MIN_SAMPLES[method]
    if n >= need:
        return None
    msg = f"{method} calibration wants at least {need} samples; {where} holds {n}"
    if method == "entropy":
        raise UsageError(
            msg, hint="Add samples, or use --method minmax (any number) or percentile."
        )
    return f"{msg}: the clipping range rests on few values"


def _profile(
    model: onnx.ModelProto,
    source_sha256: str,
    calibration: Calibration,
    profile_path: Path | None,
    notes: list[str],
    progress: Callable[[int, int], None] | None,
) -> Profile:
    if profile_path is not None and profile_path.exists():
        old = Profile.load(profile_path)
        if old.source_sha256 != source_sha256:
            raise UsageError(
                f"the profile was made from model sha256 {old.source_sha256}, this model is "
                f"{source_sha256}",
                where=str(profile_path),
                hint="Profile this model with another --profile path (or delete that file).",
            )
        same_passes = old.passes == pass_names(fp32_entries())
        if old.calibration_sha256 == calibration.sha256 and same_passes:
            notes.append(f"profile reused: {profile_path} (sha256 {old.sha256[:12]})")
            return old
        why = (
            f"calibration data changed (sha256 {old.calibration_sha256[:12]} -> "
            f"{calibration.sha256[:12]})"
            if old.calibration_sha256 != calibration.sha256
            else "the compiler's fp32 passes changed"
        )
        notes.append(f"profile {profile_path} re-made: {why}")
    prof = profile_model(model, source_sha256, calibration, progress)
    if profile_path is not None:
        prof.save(profile_path)
    return prof


def quantize_model(
    model_path: Path,
    calibration: Calibration,
    opts: QuantOptions,
    *,
    source_sha256: str,
    profile_path: Path | None = None,
    report_samples: int = REPORT_SAMPLES,
    progress: Callable[[int, int], None] | None = None,
) -> Quantized:
    """The QDQ model of ``model_path`` (module doc)."""
    try:
        model = onnx.load(str(model_path))
    except Exception as exc:
        raise ModelError(f"cannot load ONNX model: {exc}", where=str(model_path)) from None
    found = already_quantized(model)
    if found:
        raise UsageError(
            f"the model is already quantised (it holds a {found})",
            where=str(model_path),
            hint="Quantise its fp32 source instead.",
        )
    warnings: list[str] = []
    w = check_samples(opts.method, len(calibration.samples), calibration.source)
    if w:
        warnings.append(w)
    notes: list[str] = []
    prof = _profile(model, source_sha256, calibration, profile_path, notes, progress)
    qdq, plan = write_qdq(model, prof, opts)
    qdq.metadata_props.extend(
        [
            onnx.StringStringEntryProto(key="guard.quantize.source_sha256", value=source_sha256),
            onnx.StringStringEntryProto(key="guard.quantize.profile_sha256", value=prof.sha256),
            onnx.StringStringEntryProto(
                key="guard.quantize.calibration_sha256", value=calibration.sha256
            ),
            onnx.StringStringEntryProto(key="guard.quantize.method", value=opts.method),
        ]
    )
    try:
        onnx.checker.check_model(qdq, full_check=True)
    except Exception as exc:
        raise InternalError(
            f"the QDQ model of {model_path} fails onnx.checker: {' '.join(str(exc).split())[:200]}"
        ) from exc
    warnings += plan.warnings
    errors: list[TensorError] = []
    if report_samples > 0:
        errors = tensor_errors(model, qdq, calibration.samples[:report_samples])
    return Quantized(qdq, prof, plan, errors, source_sha256, notes, warnings)


def kept_model_path(
    model_path: Path, calibration: Calibration, opts: QuantOptions, *, source_sha256: str,
    root: Path,
) -> Path:  # fmt: skip
    """The QDQ model of ``model_path`` on ``calibration`` with ``opts``, kept under
    ``root`` (guard's int8 cache, ``$GUARD_CACHE/int8``): the profile by (source sha256,
    calibration sha256), reused while the compiler's fp32 passes are the same (a damaged
    one is made again); the model at :func:`model_cache_path` of the profile. Quantised
    (profiled, written, checked) and kept when either is missing."""
    profile_path = root / "profiles" / f"{source_sha256[:16]}-{calibration.sha256[:16]}.json"
    if profile_path.is_file():
        try:
            prof = Profile.load(profile_path)
        except (ModelError, UsageError):
            profile_path.unlink(missing_ok=True)
        else:
            same = (prof.source_sha256, prof.calibration_sha256) == (
                source_sha256, calibration.sha256
            )  # fmt: skip
            out = model_cache_path(root, prof.sha256, opts)
            if same and prof.passes == pass_names(fp32_entries()) and out.is_file():
                return out
    q = quantize_model(
        model_path, calibration, opts, source_sha256=source_sha256, profile_path=profile_path,
        report_samples=0,
    )  # fmt: skip
    out = model_cache_path(root, q.profile_sha256, opts)
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = out.with_name(out.name + ".tmp")
    onnx.save(q.model, str(tmp))
    tmp.replace(out)
    return out
