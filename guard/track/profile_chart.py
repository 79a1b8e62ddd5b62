"""The bar chart of a result's top nodes or kernels by time, an artefact of its MLflow run.

Drawn with matplotlib (MLflow's own dependency) on a bare ``Figure``, no pyplot, so no
global state or display is touched; logged as ``profile/top_nodes.png`` beside
``result.json``. guard profile draws the same chart.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from mlflow import MlflowClient

CHART = "profile/top_nodes.png"
TOP = 10


def source_of(result: Mapping[str, Any]) -> str:
    rows = result.get("kernels") or []
    src = next((k.get("source") for k in rows if isinstance(k, Mapping)), None)
    return str(src or f"{result.get('backend')} generated kernels")


def label_of(k: Mapping[str, Any]) -> str:
    name = str(k.get("kernel") or k.get("name") or "?")
    nodes = [str(n) for n in k.get("nodes") or [] if str(n) != name]
    if nodes:
        name += f" ({', '.join(nodes[:2])}{' +' + str(len(nodes) - 2) if len(nodes) > 2 else ''})"
    return name


def profile_figure(result: Mapping[str, Any], top: int = 10) -> Any:
    """A horizontal bar chart of one result's top nodes/kernels (a matplotlib Figure, no
    pyplot: nothing global is touched)."""
    from matplotlib.figure import Figure

    rows = [k for k in result.get("kernels") or [] if isinstance(k, Mapping)][:top]
    labels = [f"{label_of(k)[:48]} [{k.get('op') or '?'}]" for k in rows][::-1]
    ms = [float(k.get("ms") or 0.0) for k in rows][::-1]
    fig = Figure(figsize=(8, 0.45 * len(rows) + 1.2), layout="constrained")
    ax = fig.add_subplot()
    ax.barh(range(len(rows)), ms, color="#4c72b0")
    ax.set_yticks(range(len(rows)), labels, fontsize=8)
    ax.set_xlabel("ms per inference")
    ax.set_title(
        f"{result.get('model')} [{result.get('backend')}]: top {len(rows)} by time "
        f"({source_of(result)})",
        fontsize=9,
    )
    return fig


def log_profile_chart(client: MlflowClient, run_id: str, result: Mapping[str, Any]) -> None:
    """The chart of ``result``'s profile on its run, when it carries one."""
    ks = result.get("kernels")
    if isinstance(ks, list) and any(isinstance(k, Mapping) for k in ks):
        client.log_figure(run_id, profile_figure(result, TOP), CHART)
