"""``guard profile RESULT``: the top nodes (onnxruntime) or kernels (bundled) by time.

Each result of a results document may carry ``kernels``: the bundled backend's generated
kernels by share of time, or, for onnxruntime, the nodes its own profiler timed
(guard.backends.ort_profile). This renders them as a table with a text bar per row; the
bar chart (also logged to MLflow) is guard.track.profile_chart's.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from guard.track.profile_chart import label_of, source_of

BAR = 24


def profiled(doc: Mapping[str, Any]) -> list[Mapping[str, Any]]:
    """The results that carry a per-node or per-kernel profile."""
    return [
        r
        for r in doc.get("results") or ()
        if isinstance(r, Mapping) and isinstance(r.get("kernels"), list) and r["kernels"]
    ]


def profile_text(results: Sequence[Mapping[str, Any]], top: int = 10) -> str:
    lines: list[str] = []
    for r in results:
        rows = [k for k in r.get("kernels") or [] if isinstance(k, Mapping)][:top]
        total = sum(float(k.get("ms") or 0.0) for k in r["kernels"] if isinstance(k, Mapping))
        lines.append(
            f"{r.get('model')} [{r.get('backend')}] {r.get('target')}: top {len(rows)} by time "
            f"({source_of(r)}; {total:.4g} ms per inference in those listed)"
        )
        lines.append(f"  {'ms':>10}  {'share':>6}  {'op':<18} name")
        for k in rows:
            share = float(k.get("share") or 0.0)
            bar = "█" * max(1, round(share * BAR)) if share > 0 else ""
            lines.append(
                f"  {float(k.get('ms') or 0.0):>10.4g}  {share:>6.1%}  {str(k.get('op') or '?'):<18}"
                f" {label_of(k)}  {bar}"
            )
        lines.append("")
    return "\n".join(lines)
