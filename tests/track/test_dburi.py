"""Database tracking URIs: a database that does not answer is refused fast, like a server."""

from __future__ import annotations

import socket
import time

import pytest

from guard.core.errors import EXIT_BAD_INPUT, TrackingError
from guard.track import check_reachable
from guard.track.dburi import check_database, database_scheme, redact


def _closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.mark.parametrize(
    "uri,scheme",
    [
        ("postgresql://u@h/db", "postgresql"),
        ("postgresql+psycopg://u@h:1/db", "postgresql"),
        ("mysql+pymysql://u@h/db", "mysql"),
        ("sqlite:///x.db", None),
        ("http://h:5000", None),
    ],
)
def test_database_schemes(uri, scheme):
    assert database_scheme(uri) == scheme


def test_unreachable_database_fails_fast_with_the_push_hint():
    uri = f"postgresql://guard:secret@127.0.0.1:{_closed_port()}/postgres"
    t = time.monotonic()
    with pytest.raises(TrackingError) as err:
        check_reachable(uri)
    assert time.monotonic() - t < 5  # not MLflow's two minutes of retries
    msg = str(err.value)
    assert "cannot reach tracking database" in msg and "secret" not in msg
    assert "guard track push" in (err.value.hint or "")
    assert err.value.exit_code == EXIT_BAD_INPUT


def test_listening_database_host_passes():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen(1)
        check_database(f"postgresql://guard@127.0.0.1:{s.getsockname()[1]}/postgres")


def test_redact_hides_only_the_password():
    assert redact("postgresql://u:pw@h:5/db") == "postgresql://u:***@h:5/db"
    assert redact("postgresql://u@h/db") == "postgresql://u@h/db"
