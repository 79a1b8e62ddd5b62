"""A throwaway PostgreSQL cluster and an ``mlflow server`` backed by it, on loopback.

Used by the scale tests and by benchmarks/history_bench.py. PostgreSQL comes from Debian's
``postgresql`` package (initdb and pg_ctl live off PATH, under /usr/lib/postgresql/N/bin);
the cluster is created in a temporary directory with trust authentication for one user,
listens only on 127.0.0.1 at a free port, and is stopped and deleted afterwards. initdb
refuses to run as root, so as root the cluster runs as the ``postgres`` system user.

Everything here starts real processes and stops them by their own process group. The
``mlflow server`` in front of the cluster is tests/mlflow_proc.py's ``MlflowServer`` (the
one tests/conftest.py's fixture starts over sqlite), re-exported here.
"""

from __future__ import annotations

import glob
import os
import shutil
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path

# tests/, where mlflow_proc lives: on sys.path under pytest already, not for a benchmark
# that puts only this directory there (benchmarks/history_bench.py).
_TESTS = str(Path(__file__).resolve().parents[1])
if _TESTS not in sys.path:
    sys.path.insert(0, _TESTS)

from mlflow_proc import MlflowServer, free_port  # noqa: E402

__all__ = ["MlflowServer", "PostgresCluster", "free_port", "missing_reason", "pg_bindir"]

PG_USER = "guard"


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
