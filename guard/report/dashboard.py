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
from collections.abc import Callable
from pathlib import Path
from typing import NotRequired, TypedDict

from guard.compare.history import suite_bound, suite_counted_bound
from guard.core.errors import UsageError
from guard.report._io import atomic_write_text, check_target
from guard.report.dashboard_charts import series_figure
from guard.report.dashboard_int8 import Int8PanelRow, int8_panel
from guard.report.dashboard_series import (
    Point,
    RunRow,
    Series,
    analyse_series,
    as_text,
    as_time,
    group_series,
)
from guard.suite import Suite, load_suite
from guard.track import find_runs
from guard.track.client import experiment_name, mlflow_client, translated
from guard.track.uri import is_http, run_url

TEMPLATE = "dashboard.html.j2"
MAX_RUNS = 5000  # per run level: newest first (find_runs)


# ---------------------------------------------------------------------------- suite, bounds


def resolve_suite(arg: str, cwd: Path | None = None) -> tuple[str, Suite | None]:
    """(suite name, loaded Suite or None) for a suite file, a shipped suite or a bare name."""
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


def bound_for(suite: Suite | None, series: Series) -> float | None:
    if suite is None:
        return None
    return suite_bound(suite, series.model, "latency_ms.p50", series.arch)


# ---------------------------------------------------------------------------- the page


def _mlflow_link(uri: str, experiment_id: str | None) -> Callable[[str], str | None]:
    def link(run_id: str) -> str | None:
        if not run_id or experiment_id is None or not is_http(uri):
            return None
        return run_url(uri, experiment_id, run_id)

    return link


class SeriesCard(TypedDict):
    """A series' card: the series, its newest point and its chart."""

    s: Series
    slug: str
    last: Point
    url: str | None
    figure: str  # the chart's HTML
    p50: float | None


class Regression(TypedDict, total=False):
    """A row of the regressions table: a p50 change point or a counted step, of a series."""

    series: Series
    slug: str
    index: int
    at: str
    before: float | None
    after: float | None
    ratio: float
    pct: float | None
    bytes_pct: float | None
    message: str | None
    point: int
    time: _dt.datetime
    from_commit: str
    to_commit: str
    from_time: _dt.datetime
    run_id: str
    metric: str
    url: str | None
    kind: str  # regression | improvement


class Invocation(TypedDict):
    time: str
    commit: str
    branch: str
    arch: str
    verdict: str
    run_id: str
    url: str | None


class DashboardContext(TypedDict):
    """Everything the template shows."""

    suite: str
    uri: str
    experiment: str
    generated: str
    series: list[SeriesCard]
    regressions: list[Regression]
    notes: list[str]
    invocations: list[Invocation]
    state: str  # ok | empty | deleted
    backends: list[str]
    targets: list[str]
    archs: list[str]
    int8: list[Int8PanelRow]
    experiment_id: NotRequired[str]


class DashboardSummary(TypedDict):
    """What ``guard dashboard`` says it wrote: counts."""

    suite: str
    state: str
    series: int
    invocations: int
    regressions: int
    results: int


def build_context(suite_name: str, suite: Suite | None, uri: str) -> DashboardContext:
    """Everything the template shows; queries MLflow once per run level."""
    with translated(uri, f"reading experiment {experiment_name(suite_name)!r}"):
        exp = mlflow_client(uri).get_experiment_by_name(experiment_name(suite_name))
    ctx: DashboardContext = {
        "suite": suite_name, "uri": uri, "experiment": experiment_name(suite_name),
        "generated": _dt.datetime.now(_dt.UTC).strftime("%Y-%m-%d %H:%M UTC"),
        "series": [], "regressions": [], "notes": [], "invocations": [], "state": "ok",
        "backends": [], "targets": [], "archs": [], "int8": [],
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

    def rows(level: str) -> list[RunRow]:
        df = find_runs(uri, suite_name, level=level, max_results=MAX_RUNS)
        found = [] if df is None or df.empty else df.to_dict("records")
        if len(found) >= MAX_RUNS:
            ctx["notes"].append(f"Showing the newest {MAX_RUNS} {level} runs only; older "
                                "history is in MLflow.")  # fmt: skip
        return found

    children = [r for r in rows("result") if as_text(r.get("status")) != "RUNNING"]
    invocations = rows("invocation")
    link = _mlflow_link(uri, ctx["experiment_id"])
    ctx["invocations"] = [
        {"time": as_time(r.get("start_time")).strftime("%Y-%m-%d %H:%M"),
         "commit": as_text(r.get("tags.guard.git.commit"))[:10] or "nogit",
         "branch": as_text(r.get("tags.guard.git.branch")), "arch": as_text(r.get("tags.guard.arch")),
         "verdict": as_text(r.get("tags.guard.verdict")) or "?", "run_id": as_text(r.get("run_id")),
         "url": link(as_text(r.get("run_id")))}
        for r in sorted(invocations, key=lambda r: as_time(r.get("start_time")), reverse=True)
    ]  # fmt: skip
    if not children:
        ctx["state"] = "empty"
        ctx["notes"].append(f"Experiment {exp.name} at {uri} holds no result runs yet.")
        return ctx
    series = group_series(children)
    for s in series:
        s.bound = bound_for(suite, s)
        s.counted_regress_pct = suite_counted_bound(suite, s.model)
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
        measured = any(
            p.metrics.get("latency_ms.p50") is not None
            or p.metrics.get("counted.instructions") is not None
            for p in s.points
        )
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
                "series": s, "slug": s.slug, **step, "metric": "p50",
                "url": link(step["run_id"]),
                "kind": "regression" if step["pct"] > 0 else "improvement",
            })  # fmt: skip
        for counted in s.counted_steps:
            ctx["regressions"].append({"series": s, "slug": s.slug, **counted,
                                       "url": link(counted["run_id"])})  # fmt: skip
    # every step has its pct (a counted step is regressed or improved: compare_counted's pct)
    ctx["regressions"].sort(key=lambda r: (r["kind"] != "regression", -abs(r["pct"] or 0.0)))
    ctx["int8"] = int8_panel(series)
    return ctx


def render(ctx: DashboardContext) -> str:
    import jinja2
    from markupsafe import Markup
    from plotly.offline import get_plotlyjs  # heavy (plotly): only when a page is rendered

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


def write_dashboard(suite_arg: str, uri: str, path: Path) -> DashboardSummary:
    """Query MLflow for the suite's experiment and write the page; returns counts."""
    check_target(path)
    name, suite = resolve_suite(suite_arg)
    ctx = build_context(name, suite, uri)
    atomic_write_text(Path(path), render(ctx))
    return {"suite": name, "state": ctx["state"], "series": len(ctx["series"]),
            "invocations": len(ctx["invocations"]), "regressions": len(ctx["regressions"]),
            "results": sum(len(s["s"].points) for s in ctx["series"])}  # fmt: skip
