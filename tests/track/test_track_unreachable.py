"""An unreachable or broken tracking server fails fast, in one line, and loses nothing."""

from __future__ import annotations

import http.server
import socket
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from track_docs import make_doc

from guard.core.errors import EXIT_BAD_INPUT, TrackingError
from guard.track import check_reachable, keep_results, log_results, push, unreachable_message


@pytest.fixture
def closed_port_uri() -> str:
    """A loopback port that was free a moment ago and has nothing listening."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    return f"http://127.0.0.1:{port}"


def _serve(health_status: int) -> Iterator[str]:
    class Handler(http.server.BaseHTTPRequestHandler):
        def _answer(self) -> None:
            status = health_status if self.path == "/health" else 404
            body = b"OK" if status == 200 else b"<html>nope</html>"
            self.send_response(status)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        do_GET = do_POST = _answer

        def log_message(self, *args) -> None:
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()


@pytest.fixture
def unhealthy_uri() -> Iterator[str]:
    yield from _serve(503)


@pytest.fixture
def not_mlflow_uri() -> Iterator[str]:
    """Answers /health but is no MLflow server: every API call gets a 404."""
    yield from _serve(200)


def _one_line_error(exc: TrackingError, uri: str) -> None:
    text = str(exc)
    assert "\n" not in text and "Traceback" not in text
    assert uri in text
    assert exc.exit_code == EXIT_BAD_INPUT


def test_closed_port_fails_fast_in_one_line(closed_port_uri: str):
    started = time.monotonic()
    with pytest.raises(TrackingError, match="cannot reach tracking server") as err:
        check_reachable(closed_port_uri, timeout_s=2.0)
    assert time.monotonic() - started < 2.0
    _one_line_error(err.value, closed_port_uri)
    assert "refused" in str(err.value).lower()


def test_unhealthy_server_is_reported(unhealthy_uri: str):
    with pytest.raises(TrackingError, match="HTTP 503") as err:
        check_reachable(unhealthy_uri)
    _one_line_error(err.value, unhealthy_uri)


def test_log_results_to_closed_port_raises_before_writing(closed_port_uri: str):
    started = time.monotonic()
    with pytest.raises(TrackingError, match="cannot reach tracking server") as err:
        log_results(make_doc(), closed_port_uri)
    assert time.monotonic() - started < 5.0
    _one_line_error(err.value, closed_port_uri)


def test_server_refusing_writes_is_a_tracking_error(not_mlflow_uri: str):
    check_reachable(not_mlflow_uri)
    started = time.monotonic()
    with pytest.raises(TrackingError, match="failed while logging suite 'smoke'") as err:
        log_results(make_doc(), not_mlflow_uri)
    assert time.monotonic() - started < 30.0
    _one_line_error(err.value, not_mlflow_uri)


def test_results_are_kept_and_the_message_says_how_to_send_them(
    closed_port_uri: str, tmp_path: Path
):
    doc = make_doc()
    path = keep_results(doc, tmp_path)
    assert path.is_file() and path.suffix == ".json"
    msg = unreachable_message(closed_port_uri, path)
    assert msg == (
        f"tracking server {closed_port_uri} unreachable: results kept at {path}; "
        f"send them later with: guard track push {path} --tracking-uri {closed_port_uri}"
    )
    with pytest.raises(TrackingError, match="cannot reach"):
        push(path, closed_port_uri)
    assert path.is_file()  # a failed push keeps the file


def test_sqlite_store_in_a_missing_directory(tmp_path: Path):
    uri = f"sqlite:///{tmp_path}/absent/m.db"
    with pytest.raises(TrackingError, match="does not exist"):
        check_reachable(uri)
