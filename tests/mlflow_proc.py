"""A real ``mlflow server`` on 127.0.0.1, started and stopped by its own process group.

One helper for every test and benchmark that needs a server: tests/conftest.py's
``mlflow_server`` fixture (a sqlite store) and tests/scale/scale_stack.py (a PostgreSQL
store). The server runs in a new session (it spawns worker processes); ``stop`` ends the
whole group, SIGTERM first, then SIGKILL, and waits for the workers to go.
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def mlflow_executable() -> str:
    # The venv's own console script, so the server matches the client under test.
    candidate = Path(sys.executable).with_name("mlflow")
    return str(candidate) if candidate.exists() else "mlflow"


def healthy(url: str) -> bool:
    try:
        with urllib.request.urlopen(f"{url}/health", timeout=1.0) as resp:
            return resp.status == 200
    except (urllib.error.URLError, OSError):
        return False


def stop_group(proc: subprocess.Popen[bytes]) -> None:
    """End ``proc``'s process group: SIGTERM, then SIGKILL, each with a bounded wait."""
    try:
        pgid = os.getpgid(proc.pid)
    except ProcessLookupError:
        return
    for sig, wait_s in ((signal.SIGTERM, 10.0), (signal.SIGKILL, 5.0)):
        try:
            os.killpg(pgid, sig)
        except ProcessLookupError:
            return
        try:
            proc.wait(timeout=wait_s)
        except subprocess.TimeoutExpired:
            continue
        # The leader is gone; workers in the group may linger for a moment.
        deadline = time.monotonic() + wait_s
        while time.monotonic() < deadline:
            try:
                os.killpg(pgid, 0)
            except ProcessLookupError:
                return
            time.sleep(0.1)


@dataclass
class MlflowServer:
    """``mlflow server`` on 127.0.0.1 with a backend store URI and a local artifact root.

    ``start`` returns once ``/health`` answers; a server that exits first, or is not healthy
    within ``timeout_s``, is a RuntimeError carrying the tail of its stderr (and is stopped).
    """

    backend_uri: str
    root: Path
    port: int = field(default_factory=free_port)
    workers: int = 1
    proc: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def artifacts(self) -> Path:
        return self.root / "artifacts"

    def start(self, timeout_s: float = 120.0) -> MlflowServer:
        self.root.mkdir(parents=True, exist_ok=True)
        cmd = [
            mlflow_executable(),
            "server",
            "--host", "127.0.0.1",
            "--port", str(self.port),
            "--workers", str(self.workers),
            "--backend-store-uri", self.backend_uri,
            "--artifacts-destination", str(self.artifacts),
        ]  # fmt: skip
        env = dict(
            os.environ, MLFLOW_SERVER_ENABLE_JOB_EXECUTION="false", MLFLOW_DISABLE_TELEMETRY="true"
        )
        env.pop("MLFLOW_TRACKING_URI", None)
        with (
            open(self.root / "server.out", "ab") as out,
            open(self.root / "server.err", "ab") as err,
        ):
            self.proc = subprocess.Popen(
                cmd, cwd=self.root, env=env, stdout=out, stderr=err, start_new_session=True
            )
        started = time.monotonic()
        while not healthy(self.url):
            if self.proc.poll() is not None:
                code = self.proc.returncode
                self.stop()
                raise RuntimeError(
                    f"mlflow server exited with {code} before becoming healthy; "
                    f"stderr tail:\n{self.err_tail()}"
                )
            if time.monotonic() - started > timeout_s:
                self.stop()
                raise RuntimeError(
                    f"mlflow server not healthy at {self.url}/health after {timeout_s:.0f} s; "
                    f"stderr tail:\n{self.err_tail()}"
                )
            time.sleep(0.25)
        return self

    def stop(self) -> None:
        proc, self.proc = self.proc, None
        if proc is not None:
            stop_group(proc)

    def err_tail(self, n: int = 3000) -> str:
        try:
            return (self.root / "server.err").read_text(errors="replace")[-n:]
        except OSError as exc:
            return f"<cannot read {self.root / 'server.err'}: {exc}>"
