"""Cross-architecture consistency: the same model on x86_64 and AArch64, side by side.

A latency ratio between two architectures says nothing about a commit, so ``guard
compare`` refuses such pairs as latency rows. Their numerics, partitions and arena are
another matter: an output that drifts only on Arm, or a partition count that differs, is
exactly what a team shipping to both wants to see. This module turns such pairs into
their own rows (``cross_arch`` in the comparison document):

- output drift between the two architectures' outputs (max abs / max rel error, whether
  they are within the suite's tolerance, whether the output hashes are equal, top-1
  agreement for classifier outputs), read from the outputs each result carries
  (``numerics.outputs``, written by :func:`encode_outputs`);
- partitions and arena of both sides, and whether they are equal;
- latency: never compared (``"not compared across architectures"``).

A matched pair with an emulated side (the same AArch64 target in two runs on x86_64) gets
such a row too, instead of a latency row that could only be inconclusive.

Which pairs: within one results document (``guard run`` with ``targets: [host, aarch64]``,
compared with itself), every pair of results of one (model, backend) whose code runs on
different architectures; between two documents (an x86_64 job's results and an Arm job's),
a base and a head result of one (model, backend) on different architectures, when neither
side also has the other's architecture (then the same-architecture rows already compare
it). A pair that the ordinary rows would refuse because the hosts' arches differ (the same
AArch64 target, emulated on x86_64 and native on Arm) becomes a cross row as well.

Verdicts: ``consistent`` (outputs within tolerance or bit-identical, same partitions and
arena), ``drift`` (outputs outside tolerance: exit 1, a correctness signal), ``differs``
(outputs agree, partitions or arena differ), ``inconclusive`` (a side carries no outputs
and the hashes differ: only a bound from the two errors against the golden is known).
"""

from __future__ import annotations

import base64
import math
import zlib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from guard.compare.written import (
    CountedPairJson,
    CrossArchRowJson,
    CrossSideJson,
    EncodedOutputs,
    EncodedTensor,
    OutputDriftJson,
)
from guard.counting.verdict import moved
from guard.results.counted import Counted
from guard.results.cross_arch import CrossArchRow, OutputDrift
from guard.results.documents import ResultsDocument
from guard.results.result import Result

# Results keep their outputs whole up to this many elements in all; beyond it each output
# keeps an evenly strided sample of at most SAMPLE_ELEMENTS (the hash still covers all).
MAX_STORED_ELEMENTS = 65536
SAMPLE_ELEMENTS = 16384
OUTPUTS_ENCODING = "zlib+base64, little-endian"
CONSISTENT, DRIFT, DIFFERS, INCONCLUSIVE = "consistent", "drift", "differs", "inconclusive"
VERDICTS = (CONSISTENT, DRIFT, DIFFERS, INCONCLUSIVE)
LATENCY_NOTE = "not compared across architectures"
_ARCHES = {"x86_64": "x86_64", "amd64": "x86_64", "aarch64": "aarch64", "arm64": "aarch64"}


# ---------------------------------------------------------------------------- outputs


def encode_outputs(outputs: Sequence[np.ndarray], names: Sequence[str]) -> EncodedOutputs:
    """The outputs of one result in a compact, JSON-safe form (``numerics.outputs``)."""
    arrays = [np.asarray(o) for o in outputs]
    whole = sum(a.size for a in arrays) <= MAX_STORED_ELEMENTS
    tensors: list[EncodedTensor] = []
    for name, a in zip(names, arrays, strict=False):
        flat = a.reshape(-1)
        stride = (
            1 if whole or flat.size <= SAMPLE_ELEMENTS else math.ceil(flat.size / SAMPLE_ELEMENTS)
        )
        kept = np.ascontiguousarray(flat[::stride]).astype(a.dtype.newbyteorder("<"), copy=False)
        tensors.append({
            "name": str(name), "dtype": a.dtype.name, "shape": list(a.shape),
            "stride": stride, "data": base64.b64encode(zlib.compress(kept.tobytes(), 6)).decode(),
        })  # fmt: skip
    return {"encoding": OUTPUTS_ENCODING, "tensors": tensors}


@dataclass(frozen=True)
class StoredOutput:
    """One output as a result stores it: its name, shape, the stride of the sample kept
    (1: the whole tensor) and the kept values, flat."""

    name: Any  # as written (encode_outputs writes a str)
    shape: list[Any]
    stride: int
    values: np.ndarray


def decode_outputs(doc: Any) -> list[StoredOutput] | None:
    """The outputs :func:`encode_outputs` wrote (``numerics.outputs``); None if unusable."""
    if not isinstance(doc, Mapping) or doc.get("encoding") != OUTPUTS_ENCODING:
        return None
    out = []
    try:
        for t in doc["tensors"]:
            dtype = np.dtype(t["dtype"]).newbyteorder("<")
            values = np.frombuffer(zlib.decompress(base64.b64decode(t["data"])), dtype=dtype)
            out.append(StoredOutput(t["name"], list(t["shape"]), int(t["stride"]), values))
    except (KeyError, TypeError, ValueError, zlib.error):
        return None
    return out


# ---------------------------------------------------------------------------- pairs


def _arch(value: Any) -> str | None:
    return _ARCHES.get(str(value).lower()) if value else None


def code_arch(r: Result) -> str | None:
    """The architecture a result's code was built for (its canonical target's triple)."""
    canonical = r.manifest.target.canonical or ""
    for part in canonical.split():
        if part.startswith("-mtriple="):
            return _arch(part.split("=", 1)[1].split("-")[0])
    return None


def host_arch(r: Result) -> str | None:
    """The architecture of the machine that ran the result."""
    return _arch(r.manifest.host.arch)


def is_cross(b: Result, h: Result) -> bool:
    """Whether two results ran on different architectures (code or host)."""
    cb, ch, hb, hh = code_arch(b), code_arch(h), host_arch(b), host_arch(h)
    return (cb is not None and ch is not None and cb != ch) or (
        hb is not None and hh is not None and hb != hh
    )


def emulated(r: Result) -> bool:
    """Whether a result's latency was not measured because its code ran under emulation."""
    return r.latency_status == "emulated"


def is_consistency_pair(b: Result, h: Result) -> bool:
    """Whether a matched pair gets a consistency row here rather than a latency row:
    two architectures, or a side whose latency was not measured (emulated)."""
    return is_cross(b, h) or emulated(b) or emulated(h)


def _usable(r: Result) -> bool:
    return r.verdict != "error" and bool(r.manifest.to_json())  # built, with a manifest


def _key(r: Result) -> tuple[str, str]:
    return (r.model, r.backend)


def _native_first(a: Result, b: Result) -> tuple[Result, Result]:
    """Order a pair within one document: the measured (native) result is the reference."""
    emulated = [r.latency_status == "emulated" for r in (a, b)]
    return (b, a) if emulated[0] and not emulated[1] else (a, b)


def pair_results(
    base: ResultsDocument, head: ResultsDocument, *, same_doc: bool
) -> list[tuple[Result, Result]]:
    """The (reference, other) result pairs that get a cross-architecture row."""
    b_res = [r for r in base.results if _usable(r)]
    h_res = [r for r in head.results if _usable(r)]
    pairs: list[tuple[Result, Result]] = []
    if same_doc:
        for i, a in enumerate(b_res):
            for b in b_res[i + 1 :]:
                if _key(a) == _key(b) and is_cross(a, b):
                    pairs.append(_native_first(a, b))
        return pairs
    b_arches: dict[tuple[str, str], set[str | None]] = {}
    h_arches: dict[tuple[str, str], set[str | None]] = {}
    for rs, into in ((b_res, b_arches), (h_res, h_arches)):
        for r in rs:
            into.setdefault(_key(r), set()).add(code_arch(r))
    for b in b_res:
        for h in h_res:
            if _key(b) != _key(h):
                continue
            if b.canonical_target == h.canonical_target and (emulated(b) or emulated(h)):
                pairs.append((b, h))  # an emulated target across two runs: no latency
                continue
            if not is_cross(b, h):
                continue
            same_target = code_arch(b) == code_arch(h)  # one code, hosts of two arches
            overlap = code_arch(h) in b_arches[_key(b)] or code_arch(b) in h_arches[_key(h)]
            if same_target or not overlap:
                pairs.append((b, h))
    return pairs


# ---------------------------------------------------------------------------- one row


def _tolerance(r: Result) -> tuple[float, float]:
    for c in r.checks:
        if c.name == "tolerance":
            bound = c.bound  # {rtol, atol} (guard.checks.evaluate.tolerance_bounds)
            if isinstance(bound, Mapping):
                return float(bound.get("rtol", 1e-4)), float(bound.get("atol", 1e-5))
    return 1e-4, 1e-5


def _top1(ref: StoredOutput, other: StoredOutput) -> float | None:
    shape = ref.shape
    if ref.stride != 1 or len(shape) < 2 or any(d != 1 for d in shape[2:]) or shape[1] < 2:
        return None
    if not np.issubdtype(ref.values.dtype, np.floating):
        return None
    a = ref.values.reshape(shape[0], -1)
    b = other.values.reshape(shape[0], -1)
    return float(np.mean(np.argmax(a, axis=1) == np.argmax(b, axis=1)))


def output_drift(ref: Result, other: Result, rtol: float, atol: float) -> OutputDriftJson:
    """Drift between two results' outputs, ``ref`` the reference side."""
    rn, on = ref.numerics, other.numerics
    rh, oh = rn.output_sha256, on.output_sha256
    hash_equal = rh is not None and rh == oh
    out: OutputDriftJson = {
        "hash_equal": hash_equal,
        "rtol": rtol, "atol": atol,
        "max_abs": None, "max_rel": None, "allclose": None, "top1_agreement": None,
        "elements": None, "sampled": False,
    }  # fmt: skip
    ra, oa = decode_outputs(rn.outputs), decode_outputs(on.outputs)
    if ra is None or oa is None:
        if hash_equal:
            out.update({"max_abs": 0.0, "max_rel": 0.0, "allclose": True,
                        "how": "output hashes are equal"})  # fmt: skip
            return out
        errs = [e for e in (rn.max_abs_err, on.max_abs_err) if e is not None]
        bound = sum(errs) if len(errs) == 2 else None
        out["max_abs_bound"] = bound
        out["how"] = (
            "a side carries no outputs; the drift is at most the sum of both errors "
            "against the golden"
            if bound is not None
            else "a side carries no outputs"
        )
        return out
    if len(ra) != len(oa) or any(
        (a.shape, a.stride) != (b.shape, b.stride) for a, b in zip(ra, oa, strict=True)
    ):
        out.update({"allclose": False, "how": "the two sides' outputs differ in number or shape"})
        return out
    max_abs = max_rel = 0.0
    close = True
    elements = 0
    for a, b in zip(ra, oa, strict=True):
        x, y = a.values.astype(np.float64), b.values.astype(np.float64)
        elements += x.size
        if x.size == 0:
            continue
        both_nan = np.isnan(x) & np.isnan(y)
        if np.any(np.isnan(x) != np.isnan(y)):
            max_abs, close = math.inf, False
            continue
        diff = np.where(both_nan, 0.0, np.abs(x - y))
        max_abs = max(max_abs, float(np.max(diff)))
        rel = np.divide(diff, np.abs(x), out=np.zeros_like(diff), where=np.abs(x) > 0)
        max_rel = max(max_rel, float(np.max(rel)))
        close = close and bool(np.allclose(y, x, rtol=rtol, atol=atol, equal_nan=True))
    sampled = any(a.stride > 1 for a in ra)
    out.update({"max_abs": max_abs, "max_rel": max_rel, "allclose": close, "elements": elements,
                "sampled": sampled, "top1_agreement": _top1(ra[0], oa[0]),
                "how": "outputs of both results" + (" (a strided sample of each)" if sampled else "")})  # fmt: skip
    return out


def _side(r: Result) -> CrossSideJson:
    measured = r.latency_ms is not None and bool(r.latency_ms.to_json())
    return {
        "target": r.canonical_target,
        "arch": code_arch(r),
        "host_arch": host_arch(r),
        "latency_status": r.latency_status or ("measured" if measured else None),
    }


def cross_row(ref: Result, other: Result) -> CrossArchRowJson:
    """One cross-architecture row (its JSON, guard.results.cross_arch.CrossArchRow): output
    drift, partitions, arena; latency not compared."""
    rtol, atol = _tolerance(other)
    drift = output_drift(ref, other, rtol, atol)
    parts = [r.partitions.count if r.partitions else None for r in (ref, other)]
    arena = [r.arena_bytes for r in (ref, other)]
    parts_equal, arena_equal = parts[0] == parts[1], arena[0] == arena[1]
    if drift["allclose"] is False:
        verdict = DRIFT
    elif drift["allclose"] is None:
        verdict = INCONCLUSIVE
    elif not (parts_equal and arena_equal):
        verdict = DIFFERS
    else:
        verdict = CONSISTENT
    sides = [_side(ref), _side(other)]
    arches = [s["arch"] for s in sides]
    return {
        "model": ref.model,
        "backend": ref.backend,
        "arches": arches,
        "sides": sides,
        "verdict": verdict,
        "outputs": drift,
        "partitions": parts,
        "partitions_equal": parts_equal,
        "arena_bytes": arena,
        "arena_equal": arena_equal,
        "latency": LATENCY_NOTE,
        "counted": _counted_pair(ref, other),
        "summary": _summary(verdict, OutputDrift.from_json(drift), parts, arena, arches),
    }


def _counted_pair(ref: Result, other: Result) -> CountedPairJson | None:
    """Counted cost on each architecture (guard run --counted): instructions and bytes moved
    per inference, side by side. Work on two ISAs, not one count: never a verdict."""
    blocks: list[Counted] = []
    instructions: list[float] = []
    for r in (ref, other):
        b = r.counted
        if b is None or b.instructions is None:
            return None
        blocks.append(b)
        instructions.append(float(b.instructions))
    return {
        "instructions": instructions,
        "bytes_moved": [moved(b) for b in blocks],  # None: not counted (hardware counter)
        "targets": [b.target for b in blocks],
    }  # fmt: skip


def _si(x: float) -> str:
    for scale, prefix in ((1e9, "G"), (1e6, "M"), (1e3, "k")):
        if abs(x) >= scale:
            return f"{x / scale:.4g} {prefix}"
    return f"{x:.4g}"


def counted_cell(r: CrossArchRow) -> str:
    c = r.counted
    if c is None or not c.instructions:
        return ""
    i, m = c.instructions, c.bytes_moved
    if m[0] is None or m[1] is None:
        return f"; counted {_si(i[0])} / {_si(i[1])} instructions per inference"
    return (f"; counted {_si(i[0])} / {_si(i[1])} instructions, {_si(m[0])}B / {_si(m[1])}B "
            "moved per inference")  # fmt: skip


def _summary(verdict: str, drift: OutputDrift, parts: list[Any], arena: list[Any],
             arches: list[str | None]) -> str:  # fmt: skip
    a, b = (x or "?" for x in arches)
    bits = []
    if drift.hash_equal:
        bits.append("outputs bit-identical")
    elif drift.max_abs is not None:
        bits.append(f"outputs max abs {drift.max_abs:.3g}, max rel {drift.max_rel:.3g} "
                    f"({'within' if drift.allclose else 'outside'} rtol={drift.rtol:g} "
                    f"atol={drift.atol:g})")  # fmt: skip
    else:
        bits.append(drift.how if drift.how is not None else "outputs not comparable")
    if drift.top1_agreement is not None:
        bits.append(f"top-1 agreement {drift.top1_agreement:.3f}")
    if parts[0] != parts[1]:
        bits.append(f"partitions {parts[0]} vs {parts[1]}")
    if arena[0] != arena[1]:
        bits.append(f"arena {arena[0]} vs {arena[1]} B")
    return f"{verdict}: {a} vs {b}: " + "; ".join(bits)


# ---------------------------------------------------------------------------- document


def is_same_run(base: ResultsDocument, head: ResultsDocument) -> bool:
    """Whether two results documents are one run (``guard compare r.json r.json``)."""
    return base is head or base == head


def cross_arch_rows(
    base: ResultsDocument, head: ResultsDocument, *, same_doc: bool | None = None
) -> list[CrossArchRowJson]:
    """Every cross-architecture row between two results documents (or within one:
    ``same_doc``, else whether the two are one run)."""
    same = is_same_run(base, head) if same_doc is None else same_doc
    return [cross_row(a, b) for a, b in pair_results(base, head, same_doc=same)]


def failing(rows: Sequence[CrossArchRow], *, strict: bool = False) -> list[CrossArchRow]:
    """Rows that make ``guard compare`` exit 1: drift always; differs/inconclusive if strict."""
    bad = {DRIFT, DIFFERS, INCONCLUSIVE} if strict else {DRIFT}
    return [r for r in rows if r.verdict in bad]


HEADERS = ["model / backend", "architectures", "verdict", "outputs max abs / rel", "hash",
           "top-1 agreement", "partitions", "arena bytes", "latency"]  # fmt: skip


def _fmt(x: Any, spec: str = "{:.3g}") -> str:
    return "n/a" if x is None else spec.format(x)


def row_cells(r: CrossArchRow) -> list[str]:
    o = r.outputs
    pa, ar = r.partitions or (None, None), r.arena_bytes or (None, None)
    arches = " vs ".join(f"{s.arch}{' (emulated)' if s.latency_status == 'emulated' else ''}"
                         for s in r.sides)  # fmt: skip
    drift = (f"{_fmt(o.max_abs)} / {_fmt(o.max_rel)}"
             if o.max_abs is not None else o.how if o.how is not None else "n/a")  # fmt: skip
    return [
        f"{r.model} / {r.backend}", arches, str(r.verdict), drift,
        "equal" if o.hash_equal else "differs", _fmt(o.top1_agreement),
        f"{pa[0]} vs {pa[1]}" if pa[0] != pa[1] else str(pa[0]),
        f"{ar[0]} vs {ar[1]}" if ar[0] != ar[1] else str(ar[0]),
        (r.latency if r.latency is not None else LATENCY_NOTE) + counted_cell(r),
    ]  # fmt: skip


def markdown_lines(rows: Sequence[CrossArchRow]) -> list[str]:
    """The "Cross-architecture consistency" section of the Markdown report ([] if no rows)."""
    if not rows:
        return []
    lines = [
        "## Cross-architecture consistency", "",
        "Outputs, partitions and arena of one model on two architectures; latency is not "
        "compared across architectures. `drift` (outputs outside tolerance) fails the "
        "comparison.", "",
        "| " + " | ".join(HEADERS) + " |", "|" + "---|" * len(HEADERS),
    ]  # fmt: skip
    for r in rows:
        lines.append("| " + " | ".join(c.replace("|", "\\|") for c in row_cells(r)) + " |")
    return lines
