"""The bar chart of a result's top nodes or kernels by time, an artefact of its MLflow run.

An SVG document written directly (MLflow's artifact view shows it as an image), logged
as ``profile/top_nodes.svg`` beside ``result.json``; ``guard profile --chart`` writes the
same chart.
"""

from __future__ import annotations

from typing import TYPE_CHECKING
from xml.sax.saxutils import escape

from guard.results.result import Kernel, Result

if TYPE_CHECKING:
    from mlflow import MlflowClient

CHART = "profile/top_nodes.svg"
TOP = 10


def source_of(result: Result) -> str:
    src = next((k.source for k in result.kernels), None)
    return str(src or f"{result.backend} generated kernels")


def label_of(k: Kernel) -> str:
    name = str(k.label or "?")
    nodes = [n for n in k.nodes if n != name]
    if nodes:
        name += f" ({', '.join(nodes[:2])}{' +' + str(len(nodes) - 2) if len(nodes) > 2 else ''})"
    return name


def profile_svg(result: Result, top: int = TOP) -> str:
    """A horizontal bar chart of one result's top nodes/kernels, as a small SVG document.

    Written directly (a few rectangles and labels): it costs microseconds per result, where
    a plotting library costs a fifth of a second, and a suite of thousands of models logs
    one chart per result."""
    rows = result.kernels[:top]
    ms = [float(k.ms or 0.0) for k in rows]
    longest = max(ms, default=0.0) or 1.0
    label_w, bar_w, row_h, head = 330, 300, 22, 34
    width, height = label_w + bar_w + 90, head + row_h * len(rows) + 10
    title = (
        f"{result.model} [{result.backend}]: top {len(rows)} by time "
        f"({source_of(result)}), ms per inference"
    )
    out = [
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" '
        f'font-family="sans-serif" font-size="11">',
        f'<rect width="{width}" height="{height}" fill="white"/>',
        f'<text x="8" y="18" font-size="12" font-weight="bold">{escape(title)}</text>',
    ]
    for i, (k, v) in enumerate(zip(rows, ms, strict=True)):
        y = head + i * row_h
        w = max(1.0, bar_w * v / longest)
        label = f"{label_of(k)[:44]} [{k.op or '?'}]"
        share = k.share
        tail = f"{v:.4g}" + (f" ({float(share):.0%})" if share is not None else "")
        out += [
            f'<text x="{label_w - 6}" y="{y + 14}" text-anchor="end">{escape(label)}</text>',
            f'<rect x="{label_w}" y="{y + 3}" width="{w:.1f}" height="{row_h - 6}" '
            'fill="#4c72b0"/>',
            f'<text x="{label_w + w + 4:.1f}" y="{y + 14}">{escape(tail)}</text>',
        ]
    out.append("</svg>")
    return "\n".join(out) + "\n"


def log_profile_chart(client: MlflowClient, run_id: str, result: Result) -> None:
    """The chart of ``result``'s profile on its run, when it carries one."""
    if result.kernels:
        client.log_text(run_id, profile_svg(result, TOP), CHART)
