"""Models and cases: resolve and bind a model entry, build and load it.

A ``Case`` is one built, loaded (model, backend, target), what ``guard ab`` and
``guard calibrate`` time; one result of the results contract (docs/ARCHITECTURE.md) is
guard.run.one_result's (``begin_result`` / ``measure_round`` / ``finish_result``).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np

from guard.backends import get_backend
from guard.backends.base import BuildInfo, Session
from guard.core.errors import GuardError, ModelError
from guard.golden import Golden
from guard.golden.produce import ensure_golden, golden_store
from guard.manifest.written import ManifestJson
from guard.results.manifest import Manifest
from guard.run.build import build_artefact
from guard.suite import ModelEntry, load_suite
from guard.suite.model import ModelSpec, bind, load_model

# ---------------------------------------------------------------------------- models


def resolve_model(entry: ModelEntry, cache_dir: Path | None = None) -> Path:
    """The .onnx file of an entry: a zoo model (built on first use) or the suite's path; for
    the int8 entry of a ``quantize:`` block, the QDQ model built from that (guard.run.int8)."""
    if entry.quantize is not None:
        from guard.run.int8 import int8_model_path  # guard.quantize: only when asked

        return int8_model_path(entry, source_path(entry, cache_dir))
    return source_path(entry, cache_dir)


def source_path(entry: ModelEntry, cache_dir: Path | None = None) -> Path:
    """The .onnx file the suite names: a zoo model (built on first use) or the path."""
    if entry.source.startswith("zoo:"):
        from guard import zoo  # the zoo builds models with onnx helpers: only when asked

        try:
            return zoo.model_path(entry.source[4:], cache_dir)
        except GuardError as exc:
            raise ModelError(str(exc), where=f"{entry.where}.source") from None
    return Path(entry.source)


def prepare_model(entry: ModelEntry) -> tuple[ModelSpec, Path]:
    """Load and bind an entry's model (shapes and input descriptions from the suite)."""
    path = resolve_model(entry)
    model = load_model(path, entry.limits)
    return bind(model, path, dict(entry.inputs), entry.where, entry.limits), path


# ---------------------------------------------------------------------------- cases


@dataclass
class Case:
    """One built, loaded (model, backend, target) ready to run: what ab/calibrate time."""

    model: str
    backend: str
    target: str
    entry: ModelEntry
    spec: ModelSpec
    artefact: Path
    manifest: ManifestJson
    build: BuildInfo
    reused: bool
    session: Session
    feeds: dict[str, np.ndarray]

    def run_once(self) -> None:
        self.session.run(self.feeds)

    def reload(self) -> Session:
        """A fresh session of the same artefact (a new round of measurement)."""
        from guard.emulate.load import load_session

        return load_session(
            get_backend(self.backend), self.artefact, self.entry.threads, Manifest.of(self.manifest)
        )


def load_case(
    entry: ModelEntry, spec: ModelSpec, golden: Golden, backend_name: str, workdir: Path
) -> Case:
    """Build (or reuse) the artefact and load it, fed with the golden's inputs.

    An artefact for an architecture this host cannot run is loaded under emulation
    (guard.emulate): its session says ``latency_status = "emulated"``.
    """
    from guard.emulate.load import load_session

    backend = get_backend(backend_name)
    art, manifest, info, reused = build_artefact(backend, entry, spec, backend_name, workdir)
    return Case(
        entry.name,
        backend_name,
        entry.target,
        entry,
        spec,
        art,
        manifest,
        info,
        reused,
        load_session(backend, art, entry.threads, Manifest.of(manifest)),
        dict(golden.inputs),
    )


def prepare_cases(suite_path: Path, workdir: Path | None = None) -> list[Case]:
    """Build and load every (model, backend, target) of a suite, with the golden's inputs.

    These cases are timed (guard ab, guard calibrate): one that only runs under emulation
    (a foreign-architecture target) is left out, with one line saying so.
    """
    import sys

    suite = load_suite(suite_path)
    workdir = Path(workdir or Path.cwd())
    store = golden_store(suite)
    out = []
    for entry in suite.models:
        spec, path = prepare_model(entry)
        golden, _ = ensure_golden(store, entry, spec, path)
        for b in entry.backends:
            case = load_case(entry, spec, golden, b, workdir)
            if getattr(case.session, "latency_status", None) == "emulated":
                print(
                    f"guard: {entry.name} [{b}] on {entry.target}: runs only under emulation "
                    "here, so it is not timed; left out",
                    file=sys.stderr,
                )
                continue
            out.append(case)
    return out
