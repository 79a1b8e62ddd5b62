"""guard doctor: the "compiler made it slower" checklist, worked in order on recorded facts.

``diagnose(base_doc, head_doc)`` pairs the results of the two documents by (model, backend,
target as the suite spelled it) and runs the eleven steps on each pair (and a twelfth,
"which tensor lost it", on an int8 row of a ``quantize:`` model); with no base it
judges one run's health. Each step reads only recorded facts (results fields, the
artefact's own records when the artefact is still on this machine, the host's caches from
sysfs) and says "unknown: <field>" when one is missing. The document it returns is the
``--json`` contract (schema_version 1, see docs/doctor.md).
"""

from __future__ import annotations

import datetime as _dt
from collections.abc import Callable
from pathlib import Path
from typing import TypedDict

from guard.core.errors import UsageError
from guard.doctor import (
    steps_graph,
    steps_host,
    steps_int8,
    steps_kernels,
    steps_options,
    steps_reduce,
    steps_run,
    steps_tuning,
)
from guard.doctor.facts import SYSFS_CACHE, Context, HostCacheJson, Side, host_caches
from guard.doctor.finding import CAUSE, NA, SUSPECT, UNKNOWN, Evidence, Finding, FindingJson
from guard.doctor.validity import Validity, ValidityJson, p50_ratio, validity
from guard.manifest.target_string import host_cpu
from guard.results.documents import ResultsDocument
from guard.results.result import Result

SCHEMA_VERSION = 1

# The checklist, in the order engineers work it: the early steps catch most cases.
STEPS: list[tuple[str, Callable[..., Finding]]] = [
    ("measurement", steps_run.step1_measurement),  # a bad measurement explains anything
    ("compiled at all", steps_run.step2_compiled),  # zero delegation: the commonest cause
    ("partitions", steps_run.step3_partitions),  # the unsupported op behind each split
    ("graph diff", steps_graph.step4_graph_diff),  # copies, (de)quantise pairs, lost fusions
    ("layout", steps_graph.step5_layout),  # a transpose per layer
    ("schedule cache", steps_tuning.step6_tuning),  # a miss is a 2-10x slower schedule
    ("dynamic shapes", steps_graph.step7_dynamic_shapes),  # fixed shape as the control
    ("arena vs caches", steps_host.step8_arena),  # past a cache level: bandwidth-bound
    ("numerics options", steps_options.step9_numerics_options),  # flags that disable fusions
    ("kernels", steps_kernels.step10_kernels),  # one kernel is often 80% of the time
]


def _host_cpu() -> str | None:
    """This machine's CPU model as manifests spell it (host.cpu)."""
    try:
        return str(host_cpu().model)
    except Exception:  # noqa: BLE001 - an unreadable host is a missing fact
        return None


def _pick(
    doc: ResultsDocument, models: tuple[str, ...], backends: tuple[str, ...], where: str
) -> dict[tuple[str, str, str], Result]:
    out = {}
    for r in doc.results:
        if models and r.model not in models:
            continue
        if backends and r.backend not in backends:
            continue
        out[r.key.case] = r  # the suite's spelling: see ResultKey.case
    if not out:
        have = sorted({f"{r.model} [{r.backend}]" for r in doc.results})
        raise UsageError(
            "no result"
            + (f" for model {', '.join(models)}" if models else "")
            + (f" on backend {', '.join(backends)}" if backends else ""),
            where=where,
            hint=f"It has: {', '.join(have) or 'no results'}.",
        )
    return out


FASTER = 0.95  # head/base p50 below which the head is clearly not slower


def _p50(r: Result) -> float | None:
    return r.latency_ms.p50 if r.latency_ms is not None else None


def _not_slower(findings: list[Finding], base: Side | None, head: Side) -> None:
    """On a head that got faster, a difference is not the cause of a slowdown.

    Steps 3-10 explain a slowdown; when the head's p50 is clearly lower, their "cause
    found" becomes "suspect" (still a difference to look at), unless a check of the head
    that the step explains failed (a partitions check stays a cause at any speed).
    """
    ratio = p50_ratio(base, head)
    if ratio is None or ratio >= FASTER:
        return
    failed = {c.name for c in head.r.checks if c.status == "fail"}
    for f in findings:
        if (
            f.step in range(3, 11)
            and f.status == CAUSE
            and not (f.step in (2, 3) and "partitions" in failed)
        ):
            f.status = SUSPECT
            f.summary = f"head is faster ({ratio:.2f}x): a difference, not a slowdown: {f.summary}"


def _errored(base: Side | None, head: Side) -> list[Finding] | None:
    """An error result measured nothing: every step is unknown, with the error."""
    bad = [s for s in (base, head) if s is not None and s.r.verdict == "error"]
    if not bad:
        return None
    why = "; ".join(f"{s.label} result is an error ({s.r.error})" for s in bad)
    out = []
    for step, (title, _) in enumerate(STEPS, start=1):
        f = Finding(
            step, title, UNKNOWN, f"unknown: {why}", missing=[f"{s.label} result" for s in bad]
        )
        f.action = "Fix the error first (guard run prints it), then run the doctor again."
        out.append(f)
    out.append(
        Finding(
            11,
            "file it, with the smallest graph",
            NA,
            "nothing to reduce until the build or run succeeds",
        )
    )
    return out


KERNELS = 10  # the step whose times move with whatever work the sides ran


def _invalid_first(findings: list[Finding], v: Validity) -> None:
    """Facts that make the comparison invalid lead step 1's evidence (and the case's
    ``validity``, which the reports print before any step), and take causes from the
    steps they undermine.

    A changed model, inputs or host class: the sides ran different work, so a kernel's
    time (step 10) is no cause; the graph steps still say what the change did. Noise at or
    above the effect: there is no slowdown beyond the noise to explain, so step 1 is
    suspect (measure again) and no later step may claim a cause."""
    if v.valid:
        return
    f1 = findings[0]
    f1.evidence[:0] = [Evidence(i.fact, i.base, i.head) for i in v.invalid]
    noisy = [i for i in v.invalid if i.fact == "noise_pct"]
    hard = [i for i in v.invalid if i.fact != "noise_pct"]
    hidden = v.hidden_below_pct
    hides = f"; noise hides effects below {hidden:.0f}%" if hidden is not None else ""
    if noisy and f1.status != CAUSE:
        f1.status = SUSPECT
        f1.summary = f"comparison not valid: {noisy[0].why}" + (
            f"; {f1.summary}" if f1.summary else ""
        )
        f1.action = (
            "Measure until the noise is below the effect (more rounds, a quiet machine, or "
            "guard ab for an interleaved A/B); until then no later step can name a cause."
        )
    why = "; ".join(f"{i.fact} ({i.why})" for i in (noisy or hard)) + hides
    for f in findings[1:]:
        if f.status == CAUSE and (noisy or f.step == KERNELS):
            f.status = SUSPECT
            f.summary = f"not a cause while the comparison is not valid ({why}): {f.summary}"


def diagnose_pair(
    base: Side | None, head: Side, ctx: Context, v: Validity | None = None
) -> list[Finding]:
    errored = _errored(base, head)
    if errored is not None:
        return errored
    findings = [fn(base, head, ctx) for _, fn in STEPS]
    _not_slower(findings, base, head)
    _invalid_first(findings, v if v is not None else validity(base, head))
    findings.append(steps_reduce.step11_reduce(base, head, ctx, findings))
    if steps_int8.applies(head):  # an int8 row: a twelfth step
        findings.append(steps_int8.step12_int8_tensor(base, head, ctx))
    return findings


class DoctorCase(TypedDict):
    """One paired result in the doctor document: both sides' verdict and p50, the
    comparison's validity, the first step that found a cause, and every finding."""

    model: str
    backend: str
    target: str
    verdict: list[str | None]
    p50_ms: list[float | None]
    p50_ratio: float | None
    validity: ValidityJson
    first_cause: int | None
    suspects: list[int]
    findings: list[FindingJson]


class DoctorDocument(TypedDict):
    """The doctor document (``guard doctor --json``)."""

    schema_version: int
    kind: str
    created: str
    suite: str | None
    base: str | None
    head: str
    host_caches: list[HostCacheJson]
    cases: list[DoctorCase]


def diagnose(
    head_doc: ResultsDocument,
    base_doc: ResultsDocument | None = None,
    *,
    models: tuple[str, ...] = (),
    backends: tuple[str, ...] = (),
    labels: tuple[str, str] = ("base", "head"),
    sysfs_root: Path = SYSFS_CACHE,
) -> DoctorDocument:
    """The doctor document for HEAD (and BASE): one case per paired result, 11 findings each."""
    head_d, base_d = head_doc, base_doc
    if base_d is not None and base_d.suite != head_d.suite:
        raise UsageError(
            f"base is suite {base_d.suite!r}, head is suite {head_d.suite!r}: "
            "the doctor compares results of one suite",
            hint="Pass two results files of the same suite.",
        )
    heads = _pick(head_d, models, backends, labels[1])
    bases = _pick(base_d, models, backends, labels[0]) if base_d is not None else {}
    if base_d is not None:
        common = [k for k in heads if k in bases]
        if not common:
            raise UsageError(
                f"base and head share no (model, backend, target): base has "
                f"{sorted('/'.join(k) for k in bases)}, head has "
                f"{sorted('/'.join(k) for k in heads)}",
                hint="Pass results of the same models, or pick one with --model.",
            )
        keys = common
    else:
        keys = list(heads)
    ctx = Context(
        caches=host_caches(sysfs_root), host_cpu=_host_cpu(), suite_path=head_d.suite_path
    )
    cases: list[DoctorCase] = []
    for k in keys:
        head = Side("head", heads[k], head_d)
        base = Side("base", bases[k], base_d) if base_d is not None else None
        v = validity(base, head)
        findings = diagnose_pair(base, head, ctx, v)
        first = next((f for f in findings if f.status == CAUSE), None)
        cases.append(
            {
                "model": k[0],
                "backend": k[1],
                "target": k[2],
                "verdict": [base.r.verdict if base else None, head.r.verdict],
                "p50_ms": [_p50(base.r) if base else None, _p50(head.r)],
                "p50_ratio": p50_ratio(base, head),
                "validity": v.to_dict(),
                "first_cause": first.step if first else None,
                "suspects": [f.step for f in findings if f.status == SUSPECT],
                "findings": [f.to_dict() for f in findings],
            }
        )
    return {
        "schema_version": SCHEMA_VERSION,
        "kind": "guard-doctor",
        "created": _dt.datetime.now(_dt.UTC).isoformat(timespec="seconds"),
        "suite": head_d.suite,
        "base": labels[0] if base_doc is not None else None,
        "head": labels[1],
        "host_caches": [c.to_dict() for c in ctx.caches],
        "cases": cases,
    }


def exit_code(doc: DoctorDocument) -> int:
    """0 when no step found a cause, 1 when one did (like a failed check)."""
    return 1 if any(c.get("first_cause") for c in doc.get("cases") or []) else 0
