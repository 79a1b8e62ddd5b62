"""What "still shows the problem" means for a (cut) model: one oracle per reduce mode.

Every oracle builds the cut the way the suite entry builds the model (the entry's backend,
target, threads, options and profile, through guard.run.build.build_artefact), so the cut
reaches the same compiler path. A cut that fails to build or run shows a different
problem, and does not count.
"""

from __future__ import annotations

import dataclasses
import json
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypedDict

import numpy as np

from guard.backends import get_backend
from guard.backends.base import Backend, Session
from guard.checks.evaluate import tolerance_bounds
from guard.core.errors import GuardError
from guard.core.json_types import Json, JsonObject
from guard.experiment.ab import run_ab
from guard.golden import compare_outputs
from guard.golden.produce import reference_outputs
from guard.manifest.written import ManifestJson
from guard.run.build import build_artefact
from guard.stats.regress import RegressConfig
from guard.suite import InputSpec, ModelEntry
from guard.suite.model import bind, load_model


class Culprit(TypedDict):
    """A split node declined as on the full model, as its split record says."""

    node: Json
    op: Json
    declined: Json


class ObservationDetail(TypedDict, total=False):
    """What an oracle saw of a cut: the errors against the reference and the tolerance
    (accuracy), the partitions and the nodes split at (partitions), or the interleaved
    head/base comparison (latency)."""

    max_abs_err: float | None
    max_rel_err: float | None
    rtol: float
    atol: float
    partitions: int
    max: int
    fallback_nodes: int
    culprits: list[Culprit]
    ratio: float
    ci: list[float]
    verdict: str
    threshold_pct: float
    n: int
    contention: float | None


@dataclass
class Observation:
    fails: bool  # the problem is still there
    detail: ObservationDetail = field(default_factory=lambda: ObservationDetail())
    error: str | None = None  # the cut could not be built or run


def entry_for(entry: ModelEntry, path: Path, feeds: Mapping[str, np.ndarray]) -> ModelEntry:
    """The suite entry with another model file and inputs bound to the feeds' shapes."""
    inputs = {
        k: InputSpec(k, tuple(int(d) for d in np.asarray(v).shape), "zeros")
        for k, v in feeds.items()
    }
    return dataclasses.replace(entry, source=str(path), inputs=inputs)


class Builder:
    """Builds and loads models for one suite entry and backend, in a private work dir."""

    def __init__(
        self, entry: ModelEntry, backend_name: str, workdir: Path, backend: Backend | None = None
    ) -> None:
        self.entry = entry
        self.backend_name = backend_name
        self.backend = backend if backend is not None else get_backend(backend_name)
        self.workdir = workdir

    def build(self, path: Path, feeds: Mapping[str, np.ndarray]) -> tuple[Path, ManifestJson]:
        e = entry_for(self.entry, path, feeds)
        spec = bind(load_model(path, e.limits), path, dict(e.inputs), e.where, e.limits)
        art, manifest, _, _ = build_artefact(self.backend, e, spec, self.backend_name, self.workdir)
        return art, manifest

    def session(self, path: Path, feeds: Mapping[str, np.ndarray]) -> tuple[Session, Path]:
        art, _ = self.build(path, feeds)
        return self.backend.load(art, self.entry.threads), art


def _guarded(fn: Any) -> Any:
    def wrapper(self: Any, path: Path, feeds: Mapping[str, np.ndarray]) -> Observation:
        try:
            return fn(self, path, feeds)
        except (GuardError, Exception) as exc:  # noqa: BLE001 - another failure: not ours
            return Observation(False, error=f"{type(exc).__name__}: {exc}")

    return wrapper


class AccuracyOracle:
    """The cut's outputs on the backend are outside the entry's tolerance against the
    golden-producing reference (onnxruntime, optimisations off) run on the same cut."""

    mode = "accuracy"

    def __init__(self, builder: Builder) -> None:
        self.builder = builder
        self.tol = tolerance_bounds(builder.entry.checks.tolerance)

    def expected(self, path: Path, feeds: Mapping[str, np.ndarray]) -> list[np.ndarray]:
        outs, _ = reference_outputs(path, dict(feeds))
        return outs

    @_guarded
    def observe(self, path: Path, feeds: Mapping[str, np.ndarray]) -> Observation:
        want = self.expected(path, feeds)
        sess, _ = self.builder.session(path, feeds)
        got = [np.asarray(g) for g in sess.run(dict(feeds))]
        num = compare_outputs(got, want, **self.tol)
        return Observation(
            not num.get("allclose", False),
            {
                "max_abs_err": num.get("max_abs_err"),
                "max_rel_err": num.get("max_rel_err"),
                "rtol": self.tol["rtol"],
                "atol": self.tol["atol"],
            },
        )


def _splits(art: Path) -> list[JsonObject] | None:
    """The split records of the artefact's partitions.json, as loaded."""
    p = art / "partitions.json"
    if not p.is_file():
        return None
    try:
        return list(json.loads(p.read_text()).get("splits") or [])
    except (OSError, json.JSONDecodeError):
        return None


def _signature(s: JsonObject) -> tuple[str, str]:
    return (str(s.get("op")), "; ".join(sorted(str(v) for v in (s.get("declined") or {}).values())))


class PartitionsOracle:
    """The cut still splits past the entry's ``partitions.max`` on a node declined for the
    same reason (op and decline text) as on the full model."""

    mode = "partitions"

    def __init__(self, builder: Builder) -> None:
        self.builder = builder
        partitions = builder.entry.checks.partitions
        self.max = int(partitions.max if partitions is not None else 1)
        self.signatures: set[tuple[str, str]] | None = None  # set on the full model

    @_guarded
    def observe(self, path: Path, feeds: Mapping[str, np.ndarray]) -> Observation:
        sess, art = self.builder.session(path, feeds)
        info = sess.partitions()
        splits = _splits(art)
        sigs = {_signature(s) for s in splits or [] if s.get("declined")}
        if self.signatures is None:  # the full model: remember what declined
            self.signatures = sigs
        same = bool(sigs & self.signatures) if splits is not None else info.fallback_nodes > 0
        culprits = [s for s in splits or [] if _signature(s) in (self.signatures or set())]
        return Observation(
            info.count > self.max and same,
            {
                "partitions": info.count,
                "max": self.max,
                "fallback_nodes": info.fallback_nodes,
                "culprits": [
                    {"node": s.get("node"), "op": s.get("op"), "declined": s.get("declined")}
                    for s in culprits
                ],
            },
        )


class LatencyOracle:
    """Head (the suite's entry) against base (BASE.yaml's entry of the same name), run
    interleaved in this process: the paired ratio is still a regression (significant and
    larger than the threshold)."""

    mode = "latency"

    def __init__(
        self, head: Builder, base: Builder, regress_pct: float, budget_s: float, clock: Any = None
    ) -> None:
        self.head, self.base = head, base
        self.regress_pct = regress_pct
        self.budget_s = budget_s
        self.clock = clock

    @_guarded
    def observe(self, path: Path, feeds: Mapping[str, np.ndarray]) -> Observation:
        hs, _ = self.head.session(path, feeds)
        bs, _ = self.base.session(path, feeds)
        f = dict(feeds)
        out = run_ab(
            lambda: bs.run(f),
            lambda: hs.run(f),
            RegressConfig(regress_pct=self.regress_pct),
            budget_s=self.budget_s,
            warmup_s=min(0.2, self.budget_s / 10),
            clock=self.clock or time.perf_counter,
        )
        comp = out.result.comparison
        return Observation(
            comp.verdict == "regressed",
            {
                "ratio": comp.ratio,
                "ci": list(comp.ci),
                "verdict": comp.verdict,
                "threshold_pct": self.regress_pct,
                "n": comp.n_head,
                "contention": out.contention,
            },
        )
