"""Numerics against a golden: errors, tolerance, output hash, top-1 agreement, accuracy.

Bit-exactness across compiler versions is not a fair demand (fusion changes accumulation
order), so the gate is ``allclose(rtol, atol)``; the output hash and the bit-exact flag make
any change visible without failing on it.
"""

from __future__ import annotations

from typing import Any, NotRequired, TypedDict, cast

import numpy as np

from guard.core.json_types import Json
from guard.golden.store import outputs_sha256
from guard.suite.data import expected_outputs


class ExpectedJson(TypedDict, total=False):
    """The outputs against a test_data directory's output_K.pb (``numerics.expected``)."""

    allclose: bool
    max_abs_err: float | None
    max_rel_err: float | None
    error: str
    golden_sha256: str


class NumericsJson(TypedDict):
    """A result's ``numerics`` block: ``compare_outputs``' summary against the golden, then
    what the run adds (guard.run.one_result: the golden's status, the inputs' hash, the
    second golden's comparison, the outputs themselves, the accuracy)."""

    error: NotRequired[str]  # first when the output counts differ, last for a shape
    allclose: bool
    max_abs_err: float | None
    max_rel_err: float | None
    output_sha256: str
    golden_sha256: str
    bit_exact: bool
    top1: float | None
    golden_status: NotRequired[str]
    inputs_sha256: NotRequired[str]
    golden_stale: NotRequired[str | None]
    expected: NotRequired[ExpectedJson]
    golden_model_changed: NotRequired[bool]
    outputs: NotRequired[Json]  # guard.compare.crossarch.encode_outputs' EncodedOutputs
    accuracy: NotRequired[float | None]


def _as_float(a: np.ndarray) -> np.ndarray:
    return a.astype(np.float64) if a.dtype != np.float64 else a


def _classifier_logits(a: np.ndarray) -> np.ndarray | None:
    """[N, C] or [N, C, 1, 1] float outputs with C > 1 look like class scores."""
    if not np.issubdtype(a.dtype, np.floating) or a.ndim < 2:
        return None
    squeezed = a.reshape(a.shape[0], -1) if all(d == 1 for d in a.shape[2:]) else None
    if squeezed is None or squeezed.shape[1] < 2:
        return None
    return squeezed


def compare_outputs(
    got: list[np.ndarray], want: list[np.ndarray], rtol: float, atol: float
) -> NumericsJson:
    """Per-model numerics summary against the golden outputs (same order)."""
    if len(got) != len(want):
        return {
            "error": f"backend returned {len(got)} outputs, the golden has {len(want)}",
            "allclose": False,
            "max_abs_err": None,
            "max_rel_err": None,
            "output_sha256": outputs_sha256(got),
            "golden_sha256": outputs_sha256(want),
            "bit_exact": False,
            "top1": None,
        }
    max_abs = 0.0
    max_rel = 0.0
    ok = True
    shape_error = None
    for i, (g, w) in enumerate(zip(got, want, strict=True)):
        g = np.asarray(g)
        if g.shape != w.shape:
            shape_error = f"output {i}: shape {list(g.shape)} != golden {list(w.shape)}"
            ok = False
            continue
        if g.size == 0:
            continue
        gf, wf = _as_float(g), _as_float(w)
        nan_mismatch = bool(np.any(np.isnan(gf) != np.isnan(wf)))
        diff = np.abs(gf - wf)
        diff = np.where(np.isnan(gf) & np.isnan(wf), 0.0, diff)
        if nan_mismatch:
            max_abs = float("inf")
            ok = False
            continue
        max_abs = max(max_abs, float(np.max(diff)))
        denom = np.abs(wf)
        rel = np.divide(diff, denom, out=np.zeros_like(diff), where=denom > 0)
        max_rel = max(max_rel, float(np.max(rel)))
        if not np.allclose(gf, wf, rtol=rtol, atol=atol, equal_nan=True):
            ok = False
    top1 = None
    if got and shape_error is None:
        g_logits = _classifier_logits(np.asarray(got[0]))
        w_logits = _classifier_logits(want[0])
        if g_logits is not None and w_logits is not None:
            top1 = float(np.mean(np.argmax(g_logits, axis=1) == np.argmax(w_logits, axis=1)))
    got_sha, want_sha = outputs_sha256([np.asarray(g) for g in got]), outputs_sha256(want)
    out: NumericsJson = {
        "allclose": ok,
        "max_abs_err": max_abs,
        "max_rel_err": max_rel,
        "output_sha256": got_sha,
        "golden_sha256": want_sha,
        "bit_exact": got_sha == want_sha,
        "top1": top1,
    }
    if shape_error:
        out["error"] = shape_error
    return out


def compare_expected(
    got: list[Any], files: tuple[str, ...], output_names: tuple[str, ...], tol: dict[str, float]
) -> ExpectedJson:
    """Outputs against a test_data directory's output_K.pb (the second golden)."""
    want = expected_outputs(files, output_names)
    full = compare_outputs([np.asarray(g) for g in got], want, **tol)
    keep = ("allclose", "max_abs_err", "max_rel_err", "error", "golden_sha256")
    # the summary's keys that ExpectedJson has, in the summary's order
    return cast(ExpectedJson, {k: v for k, v in full.items() if k in keep})


def top1_accuracy(logits: np.ndarray, labels: np.ndarray) -> float:
    scores = logits.reshape(logits.shape[0], -1)
    return float(np.mean(np.argmax(scores, axis=1) == labels.reshape(-1)))
