"""``guard profile RESULT``: the top nodes (onnxruntime) or kernels (bundled) by time.

Each result of a results document may carry ``kernels``: the bundled backend's generated
kernels by share of time, or, for onnxruntime, the nodes its own profiler timed
(guard.backends.ort_profile). This renders them as a table with a text bar per row; the
bar chart (also logged to MLflow) is guard.track.profile_chart's.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from guard.results.documents import ResultsDocument
from guard.results.result import Result
from guard.track.profile_chart import label_of, source_of

BAR = 24


def profiled(doc: ResultsDocument | Any) -> list[Result]:
    """The results that carry a per-node or per-kernel profile."""
    if not isinstance(doc, ResultsDocument):
        doc = ResultsDocument.from_json(doc)
    return [r for r in doc.results if r.kernels]


def profile_text(results: Sequence[Result], top: int = 10) -> str:
    lines: list[str] = []
    for r in results:
        rows = r.kernels[:top]
        total = sum(float(k.ms or 0.0) for k in r.kernels)
        lines.append(
            f"{r.model} [{r.backend}] {r.target}: top {len(rows)} by time "
            f"({source_of(r)}; {total:.4g} ms per inference in those listed)"
        )
        lines.append(f"  {'ms':>10}  {'share':>6}  {'op':<18} name")
        for k in rows:
            share = float(k.share or 0.0)
            bar = "█" * max(1, round(share * BAR)) if share > 0 else ""
            lines.append(
                f"  {float(k.ms or 0.0):>10.4g}  {share:>6.1%}  {str(k.op or '?'):<18}"
                f" {label_of(k)}  {bar}"
            )
        lines.append("")
    return "\n".join(lines)
