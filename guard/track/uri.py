"""Where results are tracked: resolving the URI, checking it early, saying what to do.

Precedence: ``--tracking-uri``, then ``MLFLOW_TRACKING_URI``, then an embedded sqlite store
at ``<workdir>/.guard/mlflow.db``. The URI is always passed explicitly: with none set,
MLflow 3 silently picks ``./mlflow.db`` (or ``./mlruns``) in whatever the working directory is.
"""

from __future__ import annotations

import os
import sys
import urllib.error
import urllib.parse
import urllib.request
from pathlib import Path

from guard.core.errors import TrackingError
from guard.track.dburi import check_database
from guard.track.store import ensure_local_store

GUARD_DIR = ".guard"
DB_NAME = "mlflow.db"
ARTIFACTS_DIR = "mlartifacts"


def _quiet_mlflow() -> None:
    # Usage telemetry is on by default outside CI; guard never phones home. MLflow also
    # prints a "View run" link per finished run to stdout; guard returns the parent's URL.
    os.environ.setdefault("MLFLOW_DISABLE_TELEMETRY", "true")
    os.environ.setdefault("MLFLOW_SUPPRESS_PRINTING_URL_TO_STDOUT", "true")


def resolve_uri(cli_uri: str | None, workdir: Path) -> str:
    """The tracking URI to use: the CLI flag, else MLFLOW_TRACKING_URI, else embedded sqlite."""
    _quiet_mlflow()
    for source, candidate in (
        ("--tracking-uri", cli_uri),
        ("MLFLOW_TRACKING_URI", os.environ.get("MLFLOW_TRACKING_URI")),
    ):
        if candidate and candidate.strip():
            return validate_uri(candidate.strip(), source)
    guard_dir = Path(workdir).resolve() / GUARD_DIR
    try:
        guard_dir.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise TrackingError(
            f"cannot create the local tracking store directory {guard_dir}: {exc.strerror}",
            hint="run guard from a writable directory or pass --tracking-uri.",
        ) from exc
    return f"sqlite:///{guard_dir / DB_NAME}"


# Stores MLflow 3 opens from a URI (a "+driver" suffix is allowed on the SQL ones).
_SCHEMES = ("http", "https", "file", "sqlite", "postgresql", "mysql", "mssql", "databricks",
            "databricks-uc", "uc")  # fmt: skip


def validate_uri(uri: str, source: str = "--tracking-uri") -> str:
    """``uri`` if it names a store MLflow can open; else a one-line TrackingError (exit 2)."""
    parts = urllib.parse.urlsplit(uri)
    scheme = parts.scheme.lower().split("+", 1)[0]
    hint = "use e.g. http://127.0.0.1:5000, sqlite:///path/to/mlflow.db or file:///path/to/mlruns."
    if "://" not in uri or scheme not in _SCHEMES:
        if parts.scheme and parts.scheme not in _SCHEMES and not parts.netloc:
            # "localhost:5000" parses as scheme "localhost"
            hint = f"did you mean http://{uri}? Otherwise {hint}"
        raise TrackingError(
            f"{source} {uri!r} is not a tracking URI", hint=hint[0].upper() + hint[1:]
        )
    if scheme in ("http", "https") and not parts.hostname:
        raise TrackingError(f"{source} {uri!r} names no host", hint=hint[0].upper() + hint[1:])
    return uri


def is_http(uri: str) -> bool:
    return urllib.parse.urlsplit(uri).scheme in ("http", "https")


def sqlite_path(uri: str) -> Path | None:
    """The database file of a ``sqlite:///`` URI, or None for any other store."""
    parts = urllib.parse.urlsplit(uri)
    if parts.scheme != "sqlite":
        return None
    # sqlite:///rel.db -> path "/rel.db"; sqlite:////abs.db -> path "//abs.db".
    path = parts.path[1:] if parts.path.startswith("/") else parts.path
    return Path(path) if path and path != ":memory:" else None


def artifact_root(uri: str) -> str | None:
    """Where new experiments of a local store keep artifacts: beside the database.

    For the default store that is ``.guard/mlartifacts``, so nothing lands in ``./mlruns``.
    Servers choose their own artifact root (None).
    """
    db = sqlite_path(uri)
    if db is None:
        return None
    return (db.resolve().parent / ARTIFACTS_DIR).as_uri()


def check_reachable(uri: str, timeout_s: float = 5.0) -> None:
    """Fail fast, before measuring, when an http(s) tracking server does not answer /health."""
    _quiet_mlflow()
    if not is_http(uri):
        db = sqlite_path(uri)
        if db is not None:
            # Created whole under a lock, or a clear message with the command to run.
            ensure_local_store(uri, db, artifact_root(uri), say=_note)
        check_database(uri, timeout_s)  # postgresql:// etc.: a database that does not answer
        return
    url = uri.rstrip("/") + "/health"
    try:
        with urllib.request.urlopen(url, timeout=timeout_s) as resp:
            status = resp.status
    except urllib.error.HTTPError as exc:
        reason = f"GET /health answered HTTP {exc.code}"
    except (urllib.error.URLError, OSError, ValueError) as exc:
        inner = getattr(exc, "reason", exc)
        reason = str(inner) or type(inner).__name__
    else:
        if status == 200:
            return
        reason = f"GET /health answered HTTP {status}"
    raise TrackingError(
        f"cannot reach tracking server {uri}: {reason}",
        hint="start the server, or fix --tracking-uri / MLFLOW_TRACKING_URI; "
        "results are still kept locally and can be sent later with `guard track push`.",
    )


def _note(message: str) -> None:
    print(message, file=sys.stderr)


def run_url(uri: str, experiment_id: str, run_id: str) -> str | None:
    """The MLflow UI link of a run on a server (None for local stores)."""
    if not is_http(uri):
        return None
    return f"{uri.rstrip('/')}/#/experiments/{experiment_id}/runs/{run_id}"


def unreachable_message(uri: str, path: Path | str) -> str:
    """The one line a run prints (guard.run.deliver) when results could not be sent."""
    return (
        f"tracking server {uri} unreachable: results kept at {path}; "
        f"send them later with: guard track push {path} --tracking-uri {uri}"
    )
