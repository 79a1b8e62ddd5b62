"""The dashboard's int8 panel: each int8 row of a ``quantize:`` model beside its fp32 row.

A model with ``quantize:`` runs as two series per (backend, target, arch): ``NAME`` and
``NAME.int8`` (guard.suite.quantize). The panel pairs them on their newest runs: both
p50s and their ratio (int8 is not always faster: onnxruntime's int8 ShuffleNet is twice its
fp32 on a host without VNNI), and the int8 row's agreement with fp32 (top-1 agreement and
output SQNR, logged as ``quantization.*`` metrics).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TypedDict

from guard.report.dashboard_series import Series

INT8_SUFFIX = ".int8"  # guard.suite.quantize.INT8_SUFFIX


class Int8PanelRow(TypedDict):
    """One int8 series beside its fp32 twin, on their newest runs."""

    model: str  # the fp32 model's name
    backend: str
    target: str
    arch: str
    slug: str
    fp32_p50: float | None
    int8_p50: float | None
    ratio: float | None
    top1_agreement: float | None
    sqnr_db: float | None
    verdict: str


def int8_panel(series: Sequence[Series]) -> list[Int8PanelRow]:
    """One row per int8 series, with its fp32 twin's newest p50 when there is one."""
    by_key = {(s.model, s.backend, s.target, s.arch): s for s in series}
    rows: list[Int8PanelRow] = []
    for s in series:
        if not s.model.endswith(INT8_SUFFIX) or not s.points:
            continue
        fp32_name = s.model[: -len(INT8_SUFFIX)]
        twin = by_key.get((fp32_name, s.backend, s.target, s.arch))
        m8 = s.points[-1].metrics
        m32 = twin.points[-1].metrics if twin and twin.points else {}
        p8, p32 = m8.get("latency_ms.p50"), m32.get("latency_ms.p50")
        rows.append(
            {
                "model": fp32_name,
                "backend": s.backend,
                "target": s.target,
                "arch": s.arch,
                "slug": s.slug,
                "fp32_p50": p32,
                "int8_p50": p8,
                "ratio": p8 / p32 if p8 is not None and p32 else None,
                "top1_agreement": m8.get("quantization.top1_agreement"),
                "sqnr_db": m8.get("quantization.sqnr_db"),
                "verdict": s.points[-1].verdict,
            }
        )
    return sorted(rows, key=lambda r: (r["model"], r["backend"], r["target"], r["arch"]))
