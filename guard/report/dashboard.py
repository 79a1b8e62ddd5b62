"""A per-suite dashboard built from MLflow runs: one self-contained, interactive HTML page.

For every (model, backend, target, arch) series of ``guard/<suite>`` it draws, over the
invocations (x = time, hover = commit, date, manifest hash, value):

- p50 latency with its p10-p90 band, the suite's latency bound as a line, the change points
  that ``guard history`` finds (the same code, guard.compare.history.analyse), and vertical
  markers where a pin of the manifest changed (compiler, runtime, driver, tuning cache);
- arena bytes, partition count and max abs error, each its own chart below;

then a regressions list (asv's: which change point, how large, which commit range), filters
by backend, target and arch, and a link to each MLflow run (on a server; a local store
lists run ids). Charts are plotly with its JavaScript embedded, the page is a jinja2
template: it opens from a file or a CI artefact with no network.

An empty store, a single run, several archs or a deleted experiment give a page that says
so; a suite that is neither a file, a suite name nor an experiment is exit 2.
"""

from __future__ import annotations

import datetime as _dt
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from guard.errors import UsageError
from guard.report._io import atomic_write_text, check_target

# The pins whose change is drawn as a marker: a manifest section (its params' prefix).
PIN_FIELDS = ("compiler", "runtime", "driver", "tuning_cache", "model")
_PIN_SKIP = (
    "tuning_cache.hits",
    "tuning_cache.misses",
    "tuning_cache.entries",
    "tuning_cache.path",
    "model.sha256",
)  # fmt: skip (inputs say what changed)
PANELS = (
    ("arena_bytes", "arena (bytes)", ".3~s"),
    ("partitions.count", "partitions", "d"),
    ("numerics.max_abs_err", "max abs error", ".1~e"),
)
TEMPLATE = "dashboard.html.j2"
MAX_RUNS = 5000  # per run level: newest first (find_runs)


@dataclass
class Point:
    run_id: str
    parent_run_id: str | None
    time: _dt.datetime
    commit: str
    branch: str
    manifest_sha256: str
    verdict: str
    metrics: dict[str, float]
    pins: dict[str, str]

    @property
    def short(self) -> str:
        return self.commit[:10] if self.commit else "nogit"


@dataclass
class Series:
    model: str
    backend: str
    target: str
    arch: str
    points: list[Point]
    bound: float | None = None
    steps: list[dict[str, Any]] = field(default_factory=list)
    pin_changes: list[dict[str, Any]] = field(default_factory=list)
    analysis_note: str = ""

    @property
    def key(self) -> str:
        return f"{self.model} [{self.backend}] {self.target} ({self.arch})"

    @property
    def slug(self) -> str:
        import hashlib

        return "s" + hashlib.sha256(self.key.encode()).hexdigest()[:12]


# ---------------------------------------------------------------------------- reading runs


def _num(x: Any) -> float | None:
    try:
        f = float(x)
    except (TypeError, ValueError):
        return None
    return f if math.isfinite(f) else None


def _str(x: Any) -> str:
    if x is None or (isinstance(x, float) and math.isnan(x)):
        return ""
    return str(x)


def _time(x: Any) -> _dt.datetime:
    if isinstance(x, _dt.datetime):
        return x if x.tzinfo else x.replace(tzinfo=_dt.UTC)
    if hasattr(x, "to_pydatetime"):
        return _time(x.to_pydatetime())
    try:
        return _dt.datetime.fromisoformat(str(x)).astimezone(_dt.UTC)
    except ValueError:
        return _dt.datetime.fromtimestamp(0, _dt.UTC)


def point_from_row(row: Mapping[str, Any]) -> Point:
    """One child run (a row of find_runs) as a point of its series."""
    metrics = {
        k[len("metrics.") :]: v
        for k, raw in row.items()
        if isinstance(k, str) and k.startswith("metrics.") and (v := _num(raw)) is not None
    }
    pins = {}
    for k, raw in row.items():
        if not (isinstance(k, str) and k.startswith("params.")):
            continue
        name = k[len("params.") :]
        if name.split(".", 1)[0] in PIN_FIELDS and name not in _PIN_SKIP and _str(raw):
            pins[name] = _str(raw)
    return Point(
        run_id=_str(row.get("run_id")),
        parent_run_id=_str(row.get("tags.mlflow.parentRunId")) or None,
        time=_time(row.get("start_time")),
        commit=_str(row.get("tags.guard.git.commit")),
        branch=_str(row.get("tags.guard.git.branch")),
        manifest_sha256=_str(row.get("tags.guard.manifest_sha256")),
        verdict=_str(row.get("tags.guard.verdict")) or "?",
        metrics=metrics,
        pins=pins,
    )


def _arch(row: Mapping[str, Any]) -> str:
    return _str(row.get("tags.guard.arch")) or _str(row.get("params.host.arch")) or "?"


def group_series(rows: Sequence[Mapping[str, Any]]) -> list[Series]:
    """Child-run rows grouped per (model, backend, target, arch), oldest point first."""
    groups: dict[tuple[str, str, str, str], list[Point]] = {}
    for r in rows:
        key = (_str(r.get("tags.guard.model")) or "?", _str(r.get("tags.guard.backend")) or "?",
               _str(r.get("tags.guard.target")) or "?", _arch(r))  # fmt: skip
        groups.setdefault(key, []).append(point_from_row(r))
    out = []
    for (model, backend, target, arch), points in sorted(groups.items()):
        points.sort(key=lambda p: p.time)
        out.append(Series(model, backend, target, arch, points))
    return out


def pin_changes(points: Sequence[Point]) -> list[dict[str, Any]]:
    """Where a pinned field differs from the previous point: index, time and what changed."""
    out = []
    for i in range(1, len(points)):
        before, after = points[i - 1].pins, points[i].pins
        changed = sorted(k for k in set(before) | set(after) if before.get(k) != after.get(k))
        if changed:
            what = [f"{k}: {before.get(k, '-')} → {after.get(k, '-')}" for k in changed]
            out.append({"index": i, "time": points[i].time, "changes": what,
                        "commit": points[i].short})  # fmt: skip
    return out


def analyse_series(series: Series) -> None:
    """Change points of p50 (guard.compare.history.analyse), the bound's creep, pin markers."""
    from guard.compare.history import analyse

    series.pin_changes = pin_changes(series.points)
    pts = [p for p in series.points if (p.metrics.get("latency_ms.p50") or 0) > 0]
    if len(pts) < 2:
        series.analysis_note = "one run so far: a trend and change points need at least two"
        return
    values = [p.metrics["latency_ms.p50"] for p in pts]
    a = analyse(values, labels=[p.short for p in pts], bound=series.bound)
    for step in a["steps"]:
        i = step["index"]
        series.steps.append({
            **step,
            "point": series.points.index(pts[i]),
            "time": pts[i].time,
            "from_commit": pts[i - 1].short,
            "to_commit": pts[i].short,
            "from_time": pts[i - 1].time,
            "run_id": pts[i].run_id,
        })  # fmt: skip
    consumed = a.get("headroom_consumed")
    if consumed is not None and math.isfinite(consumed):
        series.analysis_note = f"headroom to the bound consumed: {max(0.0, consumed):.0%}"
    elif consumed is not None:
        series.analysis_note = "at or past the bound"


# ---------------------------------------------------------------------------- suite, bounds


def resolve_suite(arg: str, cwd: Path | None = None) -> tuple[str, Any]:
    """(suite name, loaded Suite or None) for a suite file, a shipped suite or a bare name."""
    from guard.suite import load_suite

    cwd = Path(cwd or Path.cwd())
    p = Path(arg)
    if arg.endswith((".yaml", ".yml")) or p.is_file():
        if not p.is_file():
            raise UsageError(
                "no such suite file",
                where=arg,
                hint="Pass a suite file or a suite name (guard dashboard smoke).",
            )
        suite = load_suite(p)
        return suite.name, suite
    for candidate in (cwd / "suites" / f"{arg}.yaml", _shipped_suites() / f"{arg}.yaml"):
        if candidate.is_file():
            try:
                suite = load_suite(candidate)
            except UsageError:
                continue
            if suite.name == arg:
                return arg, suite
    return arg, None


def _shipped_suites() -> Path:
    """The suites installed with guard (package data ``guard/suites``), else the checkout's."""
    installed = Path(__file__).resolve().parent.parent / "suites"
    checkout = Path(__file__).resolve().parent.parent.parent / "suites"
    return installed if installed.is_dir() else checkout


def bound_for(suite: Any, series: Series) -> float | None:
    from guard.compare.history import suite_bound

    if suite is None:
        return None
    return suite_bound(suite, series.model, "latency_ms.p50", series.arch)


# ---------------------------------------------------------------------------- charts


def series_figure(series: Series, mlflow_link: Any) -> Any:
    """The plotly figure of one series: latency (band, p50, bound, steps, pins) + panels.

    ``mlflow_link(run_id)`` gives a point's MLflow URL (or None): clicking a point opens it.
    """
    import plotly.graph_objects as go
    from plotly.subplots import make_subplots

    fig = make_subplots(rows=1 + len(PANELS), cols=1, shared_xaxes=True,
                        row_heights=[0.52, 0.16, 0.16, 0.16], vertical_spacing=0.07,
                        subplot_titles=["", *[label for _, label, _ in PANELS]])  # fmt: skip
    pts = series.points
    x = x_labels(pts)
    custom = [[p.short, p.time.strftime("%Y-%m-%d %H:%M UTC"), p.manifest_sha256[:12] or "-",
               p.verdict, p.branch or "-", _contention_text(p), mlflow_link(p.run_id) or ""]
              for p in pts]  # fmt: skip
    hover = ("commit %{customdata[0]} (%{customdata[4]})<br>%{customdata[1]}<br>"
             "manifest %{customdata[2]}<br>verdict %{customdata[3]}%{customdata[5]}<br>")  # fmt: skip
    # A point measured while other work took the CPU is drawn hollow and orange: a change
    # point next to one is worth a re-run before a bisect.
    contended = [_contended(p) for p in pts]
    p50_marker = {"size": 8, "color": ["#d4760a" if c else "#0969da" for c in contended],
                  "symbol": ["circle-open" if c else "circle" for c in contended],
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
    for row, (metric, label, fmt) in enumerate(PANELS, start=2):
        fig.update_yaxes(tickformat=fmt, rangemode="tozero", row=row, col=1,
                         **({"dtick": 1} if fmt == "d" else {}))  # fmt: skip
        fig.add_trace(go.Scatter(x=x, y=m(metric), mode="lines+markers", name=label,
                                 line={"color": "#57606a"}, marker={"size": 5},
                                 showlegend=False, customdata=custom,
                                 hovertemplate=hover + label + " %{y:.4g}<extra></extra>"),
                      row=row, col=1)  # fmt: skip
    fig.update_layout(
        height=720,
        margin={"l": 70, "r": 20, "t": 50, "b": 30},
        hovermode="closest",
        template="plotly_white",
        legend={"orientation": "h", "y": 1.07, "x": 1, "xanchor": "right"},
    )
    fig.update_yaxes(**latency_axis([*p10, *p50, *p90], series.bound), row=1, col=1)
    fig.update_xaxes(type="category", tickangle=0)
    return fig


CONTENDED = 0.2  # preflight's threshold: other processes' share of the spare CPU


def _contended(p: Point) -> bool:
    return (p.metrics.get("preflight.contention") or 0.0) > CONTENDED


def _contention_text(p: Point) -> str:
    share = p.metrics.get("preflight.contention")
    if share is None:
        return ""
    flag = " (contended: re-run before trusting)" if share > CONTENDED else ""
    return f"<br>CPU contention {share:.0%}{flag}"


def _side(index: int, n: int) -> str:
    """Text beside a marker, on the side with room: right of it in the left half."""
    return "left" if index < n / 2 else "right"


def _cut(text: str, limit: int = 70) -> str:
    return text if len(text) <= limit else text[: limit - 1] + "…"


def _vline(fig: Any, x: str, line: Mapping[str, Any]) -> None:
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


def latency_axis(values: Sequence[float | None], bound: float | None) -> dict[str, Any]:
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


# ---------------------------------------------------------------------------- the page


def _mlflow_link(uri: str, experiment_id: str | None) -> Any:
    from guard.track.uri import is_http, run_url

    def link(run_id: str) -> str | None:
        if not run_id or experiment_id is None or not is_http(uri):
            return None
        return run_url(uri, experiment_id, run_id)

    return link


def build_context(suite_name: str, suite: Any, uri: str) -> dict[str, Any]:
    """Everything the template shows; queries MLflow once per run level."""
    from guard.track import find_runs
    from guard.track.log import _client, _translated, experiment_name

    with _translated(uri, f"reading experiment {experiment_name(suite_name)!r}"):
        exp = _client(uri).get_experiment_by_name(experiment_name(suite_name))
    ctx: dict[str, Any] = {
        "suite": suite_name, "uri": uri, "experiment": experiment_name(suite_name),
        "generated": _dt.datetime.now(_dt.UTC).strftime("%Y-%m-%d %H:%M UTC"),
        "series": [], "regressions": [], "notes": [], "invocations": [], "state": "ok",
        "backends": [], "targets": [], "archs": [],
    }  # fmt: skip
    if exp is None:
        if suite is None:
            raise UsageError(f"no suite named {suite_name!r}: no suite file and no experiment "
                             f"{experiment_name(suite_name)!r} at {uri}",
                             hint="Pass a suite file or the name of a suite you ran with "
                             "tracking (guard dashboard smoke).")  # fmt: skip
        ctx["state"] = "empty"
        ctx["notes"].append(
            f"No runs of suite {suite_name} are logged at {uri} yet. Run "
            f"`guard run {suite.path}` with tracking on, then rebuild this page."
        )
        return ctx
    ctx["experiment_id"] = str(exp.experiment_id)
    if exp.lifecycle_stage == "deleted":
        ctx["state"] = "deleted"
        ctx["notes"].append(
            f"Experiment {exp.name} was deleted at {uri}: its runs are not shown. "
            f"Restore it (mlflow experiments restore --experiment-id "
            f"{exp.experiment_id}) or run the suite again."
        )
        return ctx

    def rows(level: str) -> list[dict[str, Any]]:
        df = find_runs(uri, suite_name, level=level, max_results=MAX_RUNS)
        found = [] if df is None or df.empty else df.to_dict("records")
        if len(found) >= MAX_RUNS:
            ctx["notes"].append(f"Showing the newest {MAX_RUNS} {level} runs only; older "
                                "history is in MLflow.")  # fmt: skip
        return found

    children = [r for r in rows("result") if _str(r.get("status")) != "RUNNING"]
    invocations = rows("invocation")
    link = _mlflow_link(uri, ctx["experiment_id"])
    ctx["invocations"] = [
        {"time": _time(r.get("start_time")).strftime("%Y-%m-%d %H:%M"),
         "commit": _str(r.get("tags.guard.git.commit"))[:10] or "nogit",
         "branch": _str(r.get("tags.guard.git.branch")), "arch": _str(r.get("tags.guard.arch")),
         "verdict": _str(r.get("tags.guard.verdict")) or "?", "run_id": _str(r.get("run_id")),
         "url": link(_str(r.get("run_id")))}
        for r in sorted(invocations, key=lambda r: _time(r.get("start_time")), reverse=True)
    ]  # fmt: skip
    if not children:
        ctx["state"] = "empty"
        ctx["notes"].append(f"Experiment {exp.name} at {uri} holds no result runs yet.")
        return ctx
    series = group_series(children)
    for s in series:
        s.bound = bound_for(suite, s)
        analyse_series(s)
    archs = sorted({s.arch for s in series})
    if len(archs) > 1:
        ctx["notes"].append(
            f"Runs from {len(archs)} archs ({', '.join(archs)}): each arch is "
            "its own series (latencies of different machines are not one "
            "trend); filter by arch above."
        )
    if len(invocations) == 1:
        ctx["notes"].append(
            "One run so far: every chart has one point; trends, bounds' "
            "headroom and change points appear from the second run on."
        )
    ctx["backends"] = sorted({s.backend for s in series})
    ctx["targets"] = sorted({s.target for s in series})
    ctx["archs"] = archs
    for s in series:
        last = s.points[-1]
        measured = any(p.metrics.get("latency_ms.p50") is not None for p in s.points)
        figure = ""
        if measured:
            figure = series_figure(s, link).to_html(
                full_html=False, include_plotlyjs=False, div_id=s.slug,
                config={"displaylogo": False, "responsive": True})  # fmt: skip
        else:
            s.analysis_note = f"nothing measured in {len(s.points)} run(s): see the MLflow run"
        ctx["series"].append({
            "s": s, "slug": s.slug, "last": last, "url": link(last.run_id), "figure": figure,
            "p50": last.metrics.get("latency_ms.p50"),
        })  # fmt: skip
        for step in s.steps:
            ctx["regressions"].append({
                "series": s, "slug": s.slug, **step,
                "url": link(step["run_id"]),
                "kind": "regression" if step["pct"] > 0 else "improvement",
            })  # fmt: skip
    ctx["regressions"].sort(key=lambda r: (r["kind"] != "regression", -abs(r["pct"])))
    return ctx


def render(ctx: Mapping[str, Any]) -> str:
    import jinja2
    from markupsafe import Markup
    from plotly.offline import get_plotlyjs

    env = jinja2.Environment(
        loader=jinja2.PackageLoader("guard.report", "templates"),
        autoescape=jinja2.select_autoescape(default=True, default_for_string=True),
        undefined=jinja2.StrictUndefined,
        trim_blocks=True,
        lstrip_blocks=True,
    )
    series = [{**s, "figure": Markup(s["figure"])} for s in ctx.get("series", ())]
    # "</script" inside the embedded bundle would end the tag early; plotly's has none.
    plotly_js = get_plotlyjs().replace("</script", "<\\/script")
    return env.get_template(TEMPLATE).render(**{**ctx, "series": series},
                                             plotly_js=Markup(plotly_js))  # fmt: skip


def write_dashboard(suite_arg: str, uri: str, path: Path) -> dict[str, Any]:
    """Query MLflow for the suite's experiment and write the page; returns counts."""
    check_target(path)
    name, suite = resolve_suite(suite_arg)
    ctx = build_context(name, suite, uri)
    atomic_write_text(Path(path), render(ctx))
    return {"suite": name, "state": ctx["state"], "series": len(ctx["series"]),
            "invocations": len(ctx["invocations"]), "regressions": len(ctx["regressions"]),
            "results": sum(len(s["s"].points) for s in ctx["series"])}  # fmt: skip
