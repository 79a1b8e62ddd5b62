"""How guard's history queries grow with the store: 1k, 10k, 50k result runs.

For each store (an embedded sqlite file; an ``mlflow server`` on 127.0.0.1 backed by a
throwaway PostgreSQL cluster with a local artifact root) the store is filled in bulk to each
size (benchmarks/history_fill.py says how) and these are timed:

- ``lookup_index_s``: the branch baseline of a 14-result head (``guard compare HEAD``'s
  lookup of branch:main) through guard's index (guard.track.index.baseline_on_branch),
  median of 3, in process;
- ``lookup_scan_s``: the same through the scan that preceded the index
  (guard.compare.baseline.latest_on_branch), once, up to ``--scan-max`` runs;
- ``compare_cli_s``, ``history_cli_s``, ``dashboard_cli_s``: wall time of the commands
  ``guard compare head.json``, ``guard history default --model resnet50 --backend
  onnxruntime``, ``guard dashboard default`` as processes (import time included: about 3 s
  of every command here is importing mlflow).

Contention: the share of the CPU that processes other than this benchmark's own (it, the
server, PostgreSQL, the commands) used while each was timed, from /proc/stat and /proc;
``*_cpu_s`` is the CPU time this benchmark's process tree spent on it (what it costs on a
quiet machine, whatever the wall time under contention was).
Runs ``nice``d, one filler and one server worker: at most about one core.

    .venv/bin/python benchmarks/history_bench.py --sizes 1000,10000,50000 \\
        --scan-max 10000 --out benchmarks/results/history_bench.json
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(ROOT / "tests" / "scale"))

from history_fill import Filler, _vary, load_template  # noqa: E402

GUARD = str(Path(sys.executable).with_name("guard"))


def _jiffies() -> tuple[int, int]:
    with open("/proc/stat") as f:
        parts = [int(x) for x in f.readline().split()[1:]]
    idle = parts[3] + parts[4]
    return sum(parts) - idle, sum(parts)


def _tree_jiffies(roots: set[int]) -> int:
    """CPU ticks (user+sys, with waited-for children) of ``roots`` and their descendants."""
    procs: dict[int, tuple[int, int]] = {}
    for d in os.listdir("/proc"):
        if not d.isdigit():
            continue
        try:
            with open(f"/proc/{d}/stat") as f:
                fields = f.read().rsplit(")", 1)[1].split()
        except OSError:
            continue
        procs[int(d)] = (int(fields[1]), sum(int(x) for x in fields[11:15]))
    mine, changed = set(roots), True
    while changed:
        changed = False
        for pid, (ppid, _) in procs.items():
            if ppid in mine and pid not in mine:
                mine.add(pid)
                changed = True
    return sum(procs[p][1] for p in mine if p in procs)


class Contention:
    """Others' share of the whole CPU between start() and stop()."""

    def __init__(self, roots: set[int]) -> None:
        self.roots = roots

    def __enter__(self) -> Contention:
        self.busy0, self.total0 = _jiffies()
        self.own0 = _tree_jiffies(self.roots)
        return self

    def __exit__(self, *exc: Any) -> None:
        busy, total = _jiffies()
        own = _tree_jiffies(self.roots)
        span = max(total - self.total0, 1)
        self.others = max(0.0, (busy - self.busy0) - (own - self.own0)) / span
        self.own_cpu_s = (own - self.own0) / os.sysconf("SC_CLK_TCK")


CPU_S: list[float] = []  # CPU seconds of the last _timed call (this process tree)


def _timed(fn: Callable[[], Any], roots: set[int]) -> tuple[float, float, Any]:
    with Contention(roots) as c:
        t = time.perf_counter()
        out = fn()
        dt = time.perf_counter() - t
    CPU_S[:] = [c.own_cpu_s]
    return dt, c.others, out


def _cli(args: list[str], uri: str, cwd: Path) -> Callable[[], int]:
    env = dict(os.environ, MLFLOW_TRACKING_URI=uri, MLFLOW_DISABLE_TELEMETRY="true")

    def run() -> int:
        proc = subprocess.run(
            [GUARD, *args], cwd=cwd, env=env, capture_output=True, text=True, timeout=1800
        )
        if proc.returncode not in (0, 1):
            raise RuntimeError(
                f"guard {' '.join(args)} exited {proc.returncode}: {proc.stderr.strip()[-500:]}"
            )
        return proc.returncode

    return run


def head_doc(n: int) -> dict[str, Any]:
    import random

    doc = _vary(load_template(), 2 * n, random.Random(1))  # an even index: x86_64
    doc["git"] = {"commit": "f" * 40, "dirty": False, "branch": "feature-head"}
    return doc


def measure(
    uri: str, filler: Filler, size: int, work: Path, roots: set[int], scan_max: int
) -> dict[str, Any]:
    from guard.compare.baseline import latest_on_branch
    from guard.track.index import baseline_on_branch

    head = head_doc(size)
    head_path = work / "head.json"
    head_path.write_text(json.dumps(head))
    wanted = head["results"]
    row: dict[str, Any] = {"runs": filler.runs, "invocations": filler.invocations}
    times, others, cpus = [], [], []
    for _ in range(3):
        dt, oth, doc = _timed(
            lambda: baseline_on_branch(uri, "default", "main", wanted, fallback=latest_on_branch),
            roots,
        )
        times.append(dt)
        others.append(oth)
        cpus.append(CPU_S[0])
    assert len(doc["results"]) == len(wanted), "the index missed a baseline"
    row["lookup_index_s"] = statistics.median(times)
    row["lookup_index_cpu_s"] = statistics.median(cpus)
    row["lookup_index_contention"] = max(others)
    if size <= scan_max:
        dt, oth, scan = _timed(lambda: latest_on_branch(uri, "default", "main", wanted), roots)
        row["lookup_scan_s"], row["lookup_scan_contention"] = dt, oth
        row["lookup_scan_cpu_s"] = CPU_S[0]
        same = [(r["model"], r["backend"], r["latency_ms"]["p50"]) for r in doc["results"]]
        row["index_equals_scan"] = same == [
            (r["model"], r["backend"], r["latency_ms"]["p50"]) for r in scan["results"]
        ]
    commands = {
        "compare_cli": ["compare", str(head_path), "--quiet"],
        "history_cli": ["history", "default", "--model", "resnet50", "--backend", "onnxruntime"],
        "dashboard_cli": ["dashboard", "default", "--out", str(work / "dash.html")],
    }
    for name, args in commands.items():
        try:
            dt, oth, _ = _timed(_cli(args, uri, work), roots)
        except RuntimeError as exc:  # a command that fails is a result too (e.g. a timeout)
            row[f"{name}_error"] = str(exc)[-300:]
            continue
        row[f"{name}_s"], row[f"{name}_contention"] = dt, oth
        row[f"{name}_cpu_s"] = CPU_S[0]
    return row


def bench_store(kind: str, sizes: list[int], base: Path, scan_max: int) -> list[dict[str, Any]]:
    from scale_stack import MlflowServer, PostgresCluster

    work = base / kind
    work.mkdir(parents=True, exist_ok=True)
    roots = {os.getpid()}
    pg = server = None
    try:
        if kind == "sqlite":
            db = work / "mlflow.db"
            uri = db_uri = f"sqlite:///{db}"
        else:
            pg = PostgresCluster().start()
            server = MlflowServer(pg.uri, work / "server").start()
            assert server.proc is not None
            roots.add(server.proc.pid)
            uri, db_uri = server.url, pg.uri
            roots |= _postgres_pids(pg)
        filler = Filler(uri, db_uri, "default", Path("/nonexistent"))
        filler.artifact_dir = _artifact_dir(filler.location, work, server)
        rows = []
        for size in sizes:
            fill_s = filler.add_runs(size)
            row = measure(uri, filler, size, work, roots, scan_max)
            row.update(store=kind, fill_s=fill_s)
            print(json.dumps(row), flush=True)
            rows.append(row)
        return rows
    finally:
        if server is not None:
            server.stop()
        if pg is not None:
            pg.stop()


def _postgres_pids(pg: Any) -> set[int]:
    try:
        return {int((pg.data / "postmaster.pid").read_text().split()[0])}
    except (OSError, ValueError, IndexError):
        return set()


def _artifact_dir(location: str, work: Path, server: Any) -> Path:
    if location.startswith("file://"):
        return Path(location[len("file://") :])
    if location.startswith("mlflow-artifacts:/"):
        return server.artifacts / location[len("mlflow-artifacts:/") :].lstrip("/")
    raise RuntimeError(f"unexpected artifact location {location}")


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--sizes", default="1000,10000,50000")
    p.add_argument("--stores", default="sqlite,postgres")
    p.add_argument("--out", type=Path, default=HERE / "results" / "history_bench.json")
    p.add_argument("--workdir", type=Path, help="where the stores live (default: a temp dir)")
    p.add_argument("--nice", type=int, default=10, help="niceness (default %(default)s)")
    p.add_argument(
        "--scan-max",
        type=int,
        default=10_000,
        help="time the old scan only up to this many runs (it is minutes beyond)",
    )
    args = p.parse_args()
    os.nice(args.nice)
    # SIGTERM stops the benchmark through its finally blocks (server and cluster stopped).
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    os.environ["MLFLOW_DISABLE_TELEMETRY"] = "true"
    sizes = [int(s) for s in args.sizes.split(",")]
    base = args.workdir or Path(tempfile.mkdtemp(prefix="guard-history-bench-"))
    rows = []
    for kind in args.stores.split(","):
        rows += bench_store(kind, sizes, base, args.scan_max)
    out = {
        "command": " ".join([Path(sys.executable).name, *sys.argv]),
        "host": {
            "machine": platform.machine(),
            "cpus": os.cpu_count(),
            "python": platform.python_version(),
        },
        "date": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "rows": rows,
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(out, indent=2) + "\n")
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
