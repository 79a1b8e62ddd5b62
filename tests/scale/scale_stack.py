"""A throwaway PostgreSQL cluster and an ``mlflow server`` backed by it, on loopback.

Used by the scale tests and by benchmarks/history_bench.py. PostgreSQL comes from Debian's
``postgresql`` package (initdb and pg_ctl live off PATH, under /usr/lib/postgresql/N/bin);
the cluster is created in a temporary directory with trust authentication for one user,
listens only on 127.0.0.1 at a free port, and is stopped and deleted afterwards. initdb
refuses to run as root, so as root the cluster runs as the ``postgres`` system user.

Everything here starts real processes and stops them by their own process group.
"""

from __future__ import annotations

import glob
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path

PG_USER = "guard"


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def pg_bindir() -> Path | None:
    """Debian's PostgreSQL server binaries (newest version), or None when not installed."""
    found = sorted(
        glob.glob("/usr/lib/postgresql/*/bin/pg_ctl"),
        key=lambda p: int(Path(p).parts[-3]) if Path(p).parts[-3].isdigit() else 0,
    )
    if found:
        return Path(found[-1]).parent
    on_path = shutil.which("pg_ctl")
    return Path(on_path).parent if on_path else None


def missing_reason() -> str | None:
    """Why the stack cannot start here (for a skip), or None when it can."""
    if pg_bindir() is None:
        return (
            "PostgreSQL server binaries not found (Debian: apt-get install -y postgresql; "
            ".ci/run installs it)"
        )
    try:
        import psycopg  # noqa: F401
    except ImportError:
        return "psycopg is not installed (pip install -e '.[test]')"
    if os.geteuid() == 0:
        try:
            import pwd

            pwd.getpwnam("postgres")
        except KeyError:
            return "running as root and there is no 'postgres' user to run initdb as"
    return None


def _as_db_user(cmd: list[str]) -> list[str]:
    if os.geteuid() == 0:
        return ["runuser", "-u", "postgres", "--", *cmd]
    return cmd


@dataclass
class PostgresCluster:
    """``root`` is where the cluster lives; None: a fresh directory under the system temp dir
    (as root this must be one the ``postgres`` user can reach, which pytest's are not)."""

    root: Path | None = None
    port: int = field(default_factory=free_port)

    def __post_init__(self) -> None:
        if self.root is None:
            import tempfile

            self.root = Path(tempfile.mkdtemp(prefix="guard-pg-"))
            self.root.chmod(0o755)

    @property
    def data(self) -> Path:
        assert self.root is not None
        return self.root / "pgdata"

    @property
    def uri(self) -> str:
        return f"postgresql://{PG_USER}@127.0.0.1:{self.port}/postgres"

    def start(self, timeout_s: float = 60.0) -> PostgresCluster:
        bindir = pg_bindir()
        if bindir is None:
            raise RuntimeError(missing_reason() or "no PostgreSQL")
        assert self.root is not None
        self.root.mkdir(parents=True, exist_ok=True)
        self.data.mkdir(mode=0o700, exist_ok=True)
        if os.geteuid() == 0:
            shutil.chown(self.root, "postgres")
            shutil.chown(self.data, "postgres")
        subprocess.run(
            _as_db_user(
                [
                    str(bindir / "initdb"),
                    "-D",
                    str(self.data),
                    "-A",
                    "trust",
                    "-U",
                    PG_USER,
                    "--no-sync",
                    "-E",
                    "UTF8",
                ]
            ),
            check=True,
            capture_output=True,
            timeout=timeout_s,
        )
        opts = (
            f"-p {self.port} -k {self.data} -c listen_addresses=127.0.0.1 "
            "-c fsync=off -c max_connections=200"
        )
        subprocess.run(
            _as_db_user(
                [
                    str(bindir / "pg_ctl"),
                    "-D",
                    str(self.data),
                    "-o",
                    opts,
                    "-l",
                    str(self.data / "server.log"),
                    "-w",
                    "-t",
                    str(int(timeout_s)),
                    "start",
                ]
            ),
            check=True,
            capture_output=True,
            timeout=timeout_s + 10,
        )
        return self

    def stop(self, remove: bool = True) -> None:
        bindir = pg_bindir()
        if bindir is not None and (self.data / "postmaster.pid").exists():
            subprocess.run(
                _as_db_user(
                    [str(bindir / "pg_ctl"), "-D", str(self.data), "-m", "fast", "-w", "stop"]
                ),
                capture_output=True,
                timeout=60,
            )
        if remove and self.root is not None:
            shutil.rmtree(self.root, ignore_errors=True)

    def log_tail(self, n: int = 2000) -> str:
        try:
            return (self.data / "server.log").read_text(errors="replace")[-n:]
        except OSError:
            return ""


def mlflow_executable() -> str:
    candidate = Path(sys.executable).with_name("mlflow")
    return str(candidate) if candidate.exists() else "mlflow"


def healthy(url: str) -> bool:
    try:
        with urllib.request.urlopen(f"{url}/health", timeout=1.0) as resp:
            return resp.status == 200
    except (urllib.error.URLError, OSError):
        return False


@dataclass
class MlflowServer:
    """``mlflow server`` on 127.0.0.1 with a backend store URI and a local artifact root."""

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
            "--host",
            "127.0.0.1",
            "--port",
            str(self.port),
            "--workers",
            str(self.workers),
            "--backend-store-uri",
            self.backend_uri,
            "--artifacts-destination",
            str(self.artifacts),
        ]
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
                raise RuntimeError(
                    f"mlflow server exited with {self.proc.returncode}: {self.err_tail()}"
                )
            if time.monotonic() - started > timeout_s:
                self.stop()
                raise RuntimeError(
                    f"mlflow server not healthy after {timeout_s:.0f} s: {self.err_tail()}"
                )
            time.sleep(0.25)
        return self

    def stop(self) -> None:
        proc, self.proc = self.proc, None
        if proc is None:
            return
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
            deadline = time.monotonic() + wait_s
            while time.monotonic() < deadline:
                try:
                    os.killpg(pgid, 0)
                except ProcessLookupError:
                    return
                time.sleep(0.1)

    def err_tail(self, n: int = 2000) -> str:
        try:
            return (self.root / "server.err").read_text(errors="replace")[-n:]
        except OSError:
            return ""
