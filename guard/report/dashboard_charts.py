"""The dashboard's charts: one plotly figure per series (p50 with its p10-p90 band, the
bound, change points and manifest markers; arena, partitions, max error and counted
instructions below) and the
latency axis they share. plotly is imported when a figure is drawn.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from typing import Any, TypedDict

from guard.report.dashboard_series import Point, Series, contended

COUNTED = "counted.instructions"
PANELS = (
    ("arena_bytes", "arena (bytes)", ".3~s"),
    ("partitions.count", "partitions", "d"),
    ("numerics.max_abs_err", "max abs error", ".1~e"),
    # Counted runs (guard run --counted): a step function, so a change point is exact.
    (COUNTED, "instructions / inference (counted)", ".4~s"),
)


def series_figure(series: Series, mlflow_link: Callable[[str], str | None]) -> Any:
    """The plotly figure of one series: latency (band, p50, bound, steps, pins) + panels.

    ``mlflow_link(run_id)`` gives a point's MLflow URL (or None): clicking a point opens it.
    """
    import plotly.graph_objects as go
    from plotly.subplots import make_subplots

    pts = series.points
    # Only the panels with a value in some run: a suite never counted draws no counted panel.
    panels = [p for p in PANELS if any(pt.metrics.get(p[0]) is not None for pt in pts)]
    fig = make_subplots(rows=1 + len(panels), cols=1, shared_xaxes=True,
                        row_heights=[0.44] + [0.56 / len(panels)] * len(panels)
                        if panels else None, vertical_spacing=0.06 if len(panels) < 4 else 0.05,
                        subplot_titles=["", *[label for _, label, _ in panels]])  # fmt: skip
    x = x_labels(pts)
    custom = [[p.short, p.time.strftime("%Y-%m-%d %H:%M UTC"), p.manifest_sha256[:12] or "-",
               p.verdict, p.branch or "-", _contention_text(p), mlflow_link(p.run_id) or ""]
              for p in pts]  # fmt: skip
    hover = ("commit %{customdata[0]} (%{customdata[4]})<br>%{customdata[1]}<br>"
             "manifest %{customdata[2]}<br>verdict %{customdata[3]}%{customdata[5]}<br>")  # fmt: skip
    # A point measured while other work took the CPU is drawn hollow and orange: a change
    # point next to one is worth a re-run before a bisect.
    flagged = [contended(p) for p in pts]
    p50_marker = {"size": 8, "color": ["#d4760a" if c else "#0969da" for c in flagged],
                  "symbol": ["circle-open" if c else "circle" for c in flagged],
                  "line": {"width": 2}}  # fmt: skip

    def m(name: str) -> list[float | None]:
        return [p.metrics.get(name) for p in pts]

    p10, p50, p90 = m("latency_ms.p10"), m("latency_ms.p50"), m("latency_ms.p90")
    if any(v is not None for v in p90) and any(v is not None for v in p10):
        fig.add_trace(go.Scatter(x=x, y=p90, mode="lines", line={"width": 0}, hoverinfo="skip",
                                 showlegend=False, name="p90"), row=1, col=1)  # fmt: skip
        fig.add_trace(go.Scatter(x=x, y=p10, mode="lines", line={"width": 0}, fill="tonexty",
                                 fillcolor="rgba(9,105,218,0.18)", name="p10-p90",
                                 customdata=custom, hovertemplate=hover + "p10 %{y:.4g} ms"
                                 "<extra></extra>"), row=1, col=1)  # fmt: skip
    fig.add_trace(go.Scatter(x=x, y=p50, mode="lines+markers", name="p50",
                             line={"color": "#0969da", "width": 2}, marker=p50_marker,
                             customdata=custom, hovertemplate=hover + "p50 <b>%{y:.4g} ms</b>"
                             "<extra></extra>"), row=1, col=1)  # fmt: skip
    if series.bound is not None:
        fig.add_trace(go.Scatter(x=[x[0], x[-1]] if len(x) > 1 else x * 2,
                                 y=[series.bound, series.bound], mode="lines",
                                 name=f"bound {series.bound:g} ms",
                                 line={"color": "#cf222e", "dash": "dash", "width": 1.5},
                                 hovertemplate=f"p50 bound {series.bound:g} ms<extra></extra>"),
                      row=1, col=1)  # fmt: skip
    for s in series.steps:
        color = "#cf222e" if s["pct"] > 0 else "#1a7f37"
        _vline(fig, x[s["point"]], {"color": color, "width": 2})
        fig.add_annotation(x=x[s["point"]], y=1.0, yref="y domain", xref="x", showarrow=False,
                           text=f" change point {s['pct']:+.1f}% ", font={"color": color},
                           xanchor=_side(s["point"], len(x)), yanchor="top",
                           bgcolor="rgba(255,255,255,0.85)", row=1, col=1)  # fmt: skip
    for c in series.pin_changes:
        _vline(fig, x[c["index"]], {"color": "#8250df", "width": 1.5, "dash": "dot"})
        fig.add_annotation(x=x[c["index"]], y=0.9, yref="y domain", xref="x", showarrow=False,
                           text="manifest:<br>" + "<br>".join(_cut(t) for t in c["changes"][:4]),
                           hovertext="<br>".join(c["changes"]), font={"color": "#8250df"},
                           xanchor=_side(c["index"], len(x)), yanchor="top", align="left",
                           bgcolor="rgba(255,255,255,0.85)", row=1, col=1)  # fmt: skip
    for row, (metric, label, fmt) in enumerate(panels, start=2):
        # From zero, except counts: a 3% step of a count must show, and counts are exact.
        fig.update_yaxes(tickformat=fmt, rangemode="normal" if metric == COUNTED else "tozero",
                         row=row, col=1, **({"dtick": 1} if fmt == "d" else {}))  # fmt: skip
        fig.add_trace(go.Scatter(x=x, y=m(metric), mode="lines+markers", name=label,
                                 line={"color": "#57606a"}, marker={"size": 5},
                                 showlegend=False, customdata=custom,
                                 hovertemplate=hover + label + " %{y:.4g}<extra></extra>"),
                      row=row, col=1)  # fmt: skip
    counted_row = next((i for i, p in enumerate(panels, start=2) if p[0] == COUNTED), None)
    if counted_row is not None:
        _counted_marks(fig, series, x, counted_row)
    fig.update_layout(
        height=420 + 110 * len(panels),
        margin={"l": 70, "r": 20, "t": 50, "b": 30},
        hovermode="closest",
        template="plotly_white",
        legend={"orientation": "h", "y": 1.07, "x": 1, "xanchor": "right"},
    )
    fig.update_yaxes(**latency_axis([*p10, *p50, *p90], series.bound), row=1, col=1)
    fig.update_xaxes(type="category", tickangle=0)
    return fig


def _counted_marks(fig: Any, series: Series, x: Sequence[str], row: int) -> None:
    """The counted series' exact steps and fingerprint breaks, on the counted panel."""
    for s in series.counted_steps:
        color = "#cf222e" if s["kind"] == "regression" else "#1a7f37"
        _vline(fig, x[s["point"]], {"color": color, "width": 1.5, "dash": "dash"})
        fig.add_annotation(x=x[s["point"]], y=1.0, yref=f"y{row} domain", xref="x",
                           showarrow=False, text=f" counted {s['pct']:+.2f}% ",
                           font={"color": color}, xanchor=_side(s["point"], len(x)),
                           yanchor="top", bgcolor="rgba(255,255,255,0.85)")  # fmt: skip
    for b in series.counted_breaks:
        _vline(fig, x[b["point"]], {"color": "#57606a", "width": 1.5, "dash": "dot"})
        # At the panel's foot (a step's label is at its head): "... emulator differs";
        # the two values are in the hover text.
        fig.add_annotation(x=x[b["point"]], y=0.0, yref=f"y{row} domain", xref="x",
                           showarrow=False, text=" counts " + b["why"].split(" (")[0] + " ",
                           hovertext=b["why"], font={"color": "#57606a"},
                           xanchor=_side(b["point"], len(x)), yanchor="bottom",
                           bgcolor="rgba(255,255,255,0.85)")  # fmt: skip


def _contention_text(p: Point) -> str:
    share = p.metrics.get("preflight.contention")
    if share is None:
        return ""
    flag = " (contended: re-run before trusting; not in the change points)" if contended(p) else ""
    return f"<br>CPU contention {share:.0%}{flag}"


def _side(index: int, n: int) -> str:
    """Text beside a marker, on the side with room: right of it in the left half."""
    return "left" if index < n / 2 else "right"


def _cut(text: str, limit: int = 70) -> str:
    return text if len(text) <= limit else text[: limit - 1] + "…"


class LineStyle(TypedDict, total=False):
    """A plotly line's style."""

    color: str
    width: float
    dash: str


class AxisTitle(TypedDict):
    text: str


class LogAxis(TypedDict, total=False):
    """A plotly log axis: its range (decades), tick spacing and format, and title."""

    type: str
    range: list[float]
    dtick: int
    tickformat: str
    title: AxisTitle


def _vline(fig: Any, x: str, line: LineStyle) -> None:
    """A vertical line at one run, through every chart of the figure (all share x)."""
    fig.add_shape(type="line", xref="x", x0=x, x1=x, yref="paper", y0=0, y1=1, line=dict(line),
                  layer="above")  # fmt: skip


def x_labels(points: Sequence[Point]) -> list[str]:
    """One category per run, oldest left: its commit and time (unique, as plotly needs)."""
    out: list[str] = []
    for p in points:
        label = f"{p.short}<br>{p.time:%m-%d %H:%M}"
        n = 2
        while label in out:
            label, n = f"{p.short}<br>{p.time:%m-%d %H:%M} #{n}", n + 1
        out.append(label)
    return out


def latency_axis(values: Sequence[float | None], bound: float | None) -> LogAxis:
    """A log axis spanning the data and the bound, at least a decade wide.

    Log, so a step reads as a ratio; fixed range, so a 4% wiggle is not auto-scaled into a
    cliff and a bound 500x above the data is still drawn without squashing the data flat.
    """
    finite = [v for v in values if v is not None and v > 0]
    if not finite:
        return {"type": "log"}
    lo, hi = min(finite), max(finite)
    if bound is not None and bound > 0:
        lo, hi = min(lo, bound), max(hi, bound)
    lo, hi = math.log10(lo / 1.5), math.log10(hi * 1.5)
    if hi - lo < 1.0:
        mid = (hi + lo) / 2
        lo, hi = mid - 0.5, mid + 0.5
    return {"type": "log", "range": [lo, hi], "dtick": 1, "tickformat": "~g",
            "title": {"text": "p50 ms (log), p10-p90 band"}}  # fmt: skip
