"""``guard calibrate``: the A/A noise of every case of a suite, into the noise file.

The statistic (A/A rounds, the robust noise bound), the noise file and its MLflow run live
in guard.bench.calibrate; this module is the command around them: it loads the suite,
builds and loads each (model, backend, target) as a guard.case.Case, calibrates it against
fresh loads of the same artefact, writes ``.guard/noise/<suite>.json`` and logs it.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

from guard.backends import get_backend
from guard.bench.calibrate import calibrate_fn, default_noise_path, log_noise, save_noise
from guard.case import Case, prepare_cases
from guard.suite import load_suite
from guard.track import check_reachable, resolve_uri


def reloader(case: Case) -> Callable[[], Callable[[], object]]:
    """Fresh sessions of a case's artefact, each a callable fed the case's inputs."""

    def reload() -> Callable[[], object]:
        session = get_backend(case.backend).load(case.artefact, case.entry.threads)
        return lambda: session.run(case.feeds)

    return reload


def calibrate_suite(
    suite_path: Path,
    *,
    rounds: int = 20,
    round_s: float = 1.0,
    out: Path | None = None,
    track: bool = True,
    tracking_uri: str | None = None,
    workdir: Path | None = None,
) -> tuple[dict[str, Any], Path]:
    """Calibrate every case of a suite; write the noise file (and log it unless ``track`` is off).

    Returns the noise document and the path it was written to.
    """
    workdir = Path(workdir or Path.cwd())
    suite = load_suite(suite_path)
    uri = None
    if track:
        # Before minutes of measuring: a bad URI or a server that does not answer is known now.
        uri = resolve_uri(tracking_uri, workdir)
        check_reachable(uri)
    entries: dict[str, Any] = {}
    host: dict[str, Any] = {}
    for case in prepare_cases(suite_path, workdir):
        canonical = (case.manifest.get("target") or {}).get("canonical", case.target)
        entries[f"{case.model}/{case.backend}/{canonical}"] = calibrate_fn(
            case.run_once, rounds=rounds, round_s=round_s, reload=reloader(case)
        )
        host = dict(case.manifest.get("host") or {})
    path = out or default_noise_path(workdir, suite.name)
    doc = save_noise(path, suite.name, entries, host)
    if uri is not None:
        log_noise(uri, suite.name, doc)
    return doc, path
