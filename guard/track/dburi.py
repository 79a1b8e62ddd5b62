"""Database tracking URIs (``postgresql://``, ``mysql://``, ``mssql://``): reachable or not.

MLflow can log straight into a database, without a server. When that database does not
answer, MLflow's engine retries for nearly two minutes and then raises a driver error; guard
instead checks once, before measuring, that the host accepts connections, and treats a
database that does not answer like a server that does not: measure anyway, keep the
results locally, say how to push them.
"""

from __future__ import annotations

import socket
import urllib.parse

from guard.core.errors import TrackingError

DEFAULT_PORTS = {"postgresql": 5432, "postgres": 5432, "mysql": 3306, "mssql": 1433}


def database_scheme(uri: str) -> str | None:
    """``postgresql`` for ``postgresql+psycopg://...``; None for anything not a database."""
    scheme = urllib.parse.urlsplit(uri).scheme.split("+", 1)[0].lower()
    return scheme if scheme in DEFAULT_PORTS else None


def redact(uri: str) -> str:
    """The URI without its password, for messages."""
    parts = urllib.parse.urlsplit(uri)
    if parts.password is None:
        return uri
    netloc = f"{parts.username}:***@{parts.hostname}" + (f":{parts.port}" if parts.port else "")
    return urllib.parse.urlunsplit(parts._replace(netloc=netloc))


def check_database(uri: str, timeout_s: float = 5.0) -> None:
    """Raise TrackingError when a database URI's host does not accept a TCP connection.

    Sockets (``?host=/run/postgresql``) and URIs without a host are left to the driver.
    """
    scheme = database_scheme(uri)
    if scheme is None:
        return
    parts = urllib.parse.urlsplit(uri)
    host = parts.hostname
    if not host:
        return
    try:
        port = parts.port or DEFAULT_PORTS[scheme]
    except ValueError:
        raise TrackingError(
            f"tracking database {redact(uri)}: the port is not a number",
            hint="fix --tracking-uri / MLFLOW_TRACKING_URI.",
        ) from None
    try:
        with socket.create_connection((host, port), timeout=timeout_s):
            return
    except OSError as exc:
        reason = exc.strerror or type(exc).__name__
    raise TrackingError(
        f"cannot reach tracking database {redact(uri)}: {host}:{port}: {reason}",
        hint="start the database, or fix --tracking-uri / MLFLOW_TRACKING_URI; "
        "results are still kept locally and can be sent later with `guard track push`.",
    )
