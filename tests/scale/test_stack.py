"""The real server stack: PostgreSQL (a throwaway cluster on loopback), ``mlflow server``
backed by it with a local artifact root, and guard processes writing to it concurrently.

Skipped, with the reason, where Debian's postgresql package (or psycopg) is missing.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest
from scale_stack import MlflowServer, PostgresCluster, missing_reason
from scale_suite import CASES, write_suite

pytestmark = [pytest.mark.slow, pytest.mark.server, pytest.mark.postgres]

GUARD = str(Path(sys.executable).with_name("guard"))
# Results identity that a sharded run must reproduce (latencies differ run to run).
STABLE = ("model", "backend", "target", "verdict")


@pytest.fixture(scope="module")
def stack(tmp_path_factory):
    reason = missing_reason()
    if reason:
        pytest.skip(reason)
    root = tmp_path_factory.mktemp("stack")
    pg = PostgresCluster().start()
    server = MlflowServer(pg.uri, root / "server")
    try:
        server.start()
    except RuntimeError as exc:
        pg.stop()
        pytest.fail(
            f"mlflow server on PostgreSQL did not start: {exc}\n{pg.log_tail()}", pytrace=False
        )
    try:
        yield pg, server
    finally:
        server.stop()
        pg.stop()


def _env(**extra: str) -> dict[str, str]:
    env = dict(os.environ, MLFLOW_DISABLE_TELEMETRY="true", **extra)
    env.pop("MLFLOW_TRACKING_URI", None)
    env.pop("GUARD_INVOCATION_ID", None)
    return env


def _guard(args: list[str], cwd: Path, timeout: float = 600, **env: str):
    return subprocess.run(
        [GUARD, *args], cwd=cwd, env=_env(**env), capture_output=True, text=True, timeout=timeout
    )


def _git_repo(path: Path) -> None:
    """A committed checkout on branch main: runs carry a commit and a branch."""
    path.mkdir(parents=True, exist_ok=True)
    for cmd in (
        ["init", "-q", "-b", "main"],
        ["add", "."],
        ["-c", "user.name=t", "-c", "user.email=t@t", "commit", "-q", "-m", "suite"],
    ):
        subprocess.run(["git", *cmd], cwd=path, check=True, capture_output=True)


def _client(server: MlflowServer):
    from mlflow import MlflowClient

    return MlflowClient(server.url)


def _runs(server: MlflowServer, suite: str, where: str = "") -> list:
    client = _client(server)
    exp = client.get_experiment_by_name(f"guard/{suite}")
    if exp is None:
        return []
    return client.search_runs([exp.experiment_id], where, max_results=10_000)


def test_four_shards_concurrently_merge_into_one_run(stack, tmp_path):
    _, server = stack
    repo = tmp_path / "repo"
    repo.mkdir()
    # GUARD_STACK_SUITE=suites/default.yaml runs the "done when" (minutes): any
    # suite file, copied into a fresh checkout (its goldens are made on the first run).
    chosen = os.environ.get("GUARD_STACK_SUITE")
    if chosen:
        suite = repo / Path(chosen).name
        suite.write_text(Path(chosen).read_text())
    else:
        suite = write_suite(repo, "sharded")
    _git_repo(repo)
    # One unsharded run first: the reference content (and warm caches and goldens).
    single = _guard(
        ["run", str(suite), "--no-track", "--json", str(tmp_path / "single.json")], repo
    )
    assert single.returncode == 0, single.stderr
    inv = "stack-test-1"

    def shard(k: int):
        return _guard(
            [
                "run",
                str(suite),
                "--shard",
                f"{k}/4",
                "--invocation-id",
                inv,
                "--tracking-uri",
                server.url,
                "--json",
                str(tmp_path / f"r{k}.json"),
            ],
            repo,
        )

    with ThreadPoolExecutor(max_workers=4) as pool:
        procs = list(pool.map(shard, range(1, 5)))
    for k, p in enumerate(procs, 1):
        assert p.returncode == 0, f"shard {k}: {p.stderr}"
    merged_path = tmp_path / "all.json"
    m = _guard(
        [
            "merge",
            *(str(tmp_path / f"r{k}.json") for k in range(1, 5)),
            "--json",
            str(merged_path),
            "--quiet",
        ],
        repo,
    )
    assert m.returncode == 0, m.stderr

    merged = json.loads(merged_path.read_text())
    ref = json.loads((tmp_path / "single.json").read_text())
    name = ref["suite"]
    cases = [(r["model"], r["backend"], r["target"]) for r in ref["results"]]
    assert chosen or set(cases) == CASES
    assert merged["suite"] == ref["suite"] and merged["git"]["commit"] == ref["git"]["commit"]
    assert [[r[k] for k in STABLE] for r in merged["results"]] == [
        [r[k] for k in STABLE] for r in ref["results"]
    ]
    for a, b in zip(merged["results"], ref["results"], strict=True):
        assert a["manifest"]["sha256"] == b["manifest"]["sha256"]  # same pins, same artefact
        assert a["numerics"]["output_sha256"] == b["numerics"]["output_sha256"]
        assert {c["name"] for c in a["checks"]} == {c["name"] for c in b["checks"]}

    # Read everything back from the server: nothing lost, nothing twice, one tree.
    parents = _runs(
        server, name, f"tags.`guard.invocation_id` = '{inv}' and tags.`guard.level` = 'invocation'"
    )
    assert len(parents) == 1, [p.info.run_id for p in parents]
    parent = parents[0].info.run_id
    shards = _runs(server, name, "tags.`guard.level` = 'shard'")
    assert sorted(s.data.tags["guard.shard"] for s in shards) == [f"{k}/4" for k in range(1, 5)]
    assert {s.data.tags["mlflow.parentRunId"] for s in shards} == {parent}
    results = _runs(server, name, "tags.`guard.level` = 'result'")
    keys = Counter(
        (r.data.tags["guard.model"], r.data.tags["guard.backend"], r.data.tags["guard.target"])
        for r in results
    )
    assert keys == Counter(cases)  # every case once
    shard_ids = {s.info.run_id for s in shards}
    assert {r.data.tags["mlflow.parentRunId"] for r in results} <= shard_ids
    assert all(r.data.tags.get("guard.invocation_id") == inv for r in results)
    assert all(r.data.tags.get("guard.baseline_key") for r in results)  # indexed
    assert all(r.info.status == "FINISHED" for r in [*shards, *results, *parents])

    # A later commit's run finds its baseline on main through guard's index: the shards'.
    (repo / "later.txt").write_text("a later commit\n")
    subprocess.run(["git", "add", "later.txt"], cwd=repo, check=True)
    subprocess.run(
        ["git", "-c", "user.name=t", "-c", "user.email=t@t", "commit", "-q", "-m", "later"],
        cwd=repo,
        check=True,
    )
    head_path = tmp_path / "head.json"
    later = _guard(["run", str(suite), "--no-track", "--json", str(head_path)], repo)
    assert later.returncode == 0, later.stderr
    cmp = _guard(
        [
            "compare",
            str(head_path),
            "--tracking-uri",
            server.url,
            "--quiet",
            "--json",
            str(tmp_path / "cmp.json"),
        ],
        repo,
    )
    assert cmp.returncode in (0, 1), cmp.stderr  # a verdict, not "no baseline"
    rows = json.loads((tmp_path / "cmp.json").read_text())["rows"]
    assert {(r["model"], r["backend"]) for r in rows} == {(m, b) for m, b, _ in cases}


def test_eight_writers_and_a_server_restart_lose_nothing(stack, tmp_path):
    """Eight concurrent guard runs log to one server while it restarts; every result that
    could not be sent is kept and pushed, exactly once (a second push sends nothing)."""
    _, server = stack
    suite = write_suite(tmp_path, "writers")
    warm = _guard(
        ["run", str(suite), "--no-track", "--model", "mlp", "--backend", "onnxruntime"], tmp_path
    )
    assert warm.returncode == 0, warm.stderr
    dirs = [tmp_path / f"w{i}" for i in range(8)]
    for d in dirs:
        d.mkdir()

    def start(d: Path) -> subprocess.Popen[str]:
        return subprocess.Popen(
            [
                GUARD,
                "run",
                str(suite),
                "--model",
                "mlp",
                "--backend",
                "onnxruntime",
                "--tracking-uri",
                server.url,
                "--json",
                str(d / "r.json"),
            ],
            cwd=d,
            env=_env(),
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            text=True,
        )

    first = [start(d) for d in dirs[:4]]
    # The server goes away once the first writer has logged, while the others run; four
    # more start and finish while it is down, then it comes back.
    deadline = time.monotonic() + 300
    while not _runs(server, "writers", "tags.`guard.level` = 'invocation'"):
        assert time.monotonic() < deadline, "no writer logged within 300 s"
        assert all(p.poll() is None or p.returncode == 0 for p in first)
        time.sleep(0.2)
    server.stop()
    second = [start(d) for d in dirs[4:]]
    errs = [p.communicate(timeout=600)[1] for p in second]
    server.start()
    errs = [p.communicate(timeout=600)[1] for p in first] + errs
    procs = first + second
    assert [p.returncode for p in procs] == [0] * 8, errs

    pending = sorted(p for d in dirs for p in (d / ".guard" / "pending").glob("*.json"))
    assert len(pending) >= 4  # at least the four that ran while the server was down
    for path in pending:
        first = _guard(["track", "push", str(path), "--tracking-uri", server.url], tmp_path)
        assert first.returncode == 0, first.stderr
        again = _guard(["track", "push", str(path), "--tracking-uri", server.url], tmp_path)
        assert again.returncode == 0 and "already" in again.stdout, again.stdout

    docs = [json.loads((d / "r.json").read_text()) for d in dirs]
    parents = [
        p
        for p in _runs(server, "writers", "tags.`guard.level` = 'invocation'")
        if p.info.status == "FINISHED"
    ]
    from guard.track.log import results_sha256

    want = Counter(results_sha256(d) for d in docs)
    got = Counter(p.data.tags["guard.results_sha256"] for p in parents)
    assert got == want and len(got) == 8  # all eight arrived, none twice
    for p in parents:
        children = _runs(server, "writers", f"tags.mlflow.parentRunId = '{p.info.run_id}'")
        assert [c.data.tags["guard.model"] for c in children] == ["mlp"]


def test_database_uri_straight_to_postgres_and_unreachable(stack, tmp_path):
    """guard can log straight into the database; one that does not answer is treated like a
    server that does not: measured anyway, kept, and the push command printed."""
    pg, _ = stack
    suite = write_suite(tmp_path, "direct")
    ok = _guard(
        ["run", str(suite), "--model", "mlp", "--backend", "onnxruntime", "--tracking-uri", pg.uri],
        tmp_path,
    )
    assert ok.returncode == 0, ok.stderr
    from mlflow import MlflowClient

    client = MlflowClient(pg.uri)
    exp = client.get_experiment_by_name("guard/direct")
    assert len(client.search_runs([exp.experiment_id], "tags.`guard.level` = 'result'")) == 1

    from scale_stack import free_port

    dead = f"postgresql://guard@127.0.0.1:{free_port()}/postgres"
    down = _guard(
        ["run", str(suite), "--model", "mlp", "--backend", "onnxruntime", "--tracking-uri", dead],
        tmp_path,
        timeout=120,
    )
    assert down.returncode == 0, down.stderr
    assert "cannot reach tracking database" in down.stderr
    assert "guard track push" in down.stderr and "Traceback" not in down.stderr
    kept = sorted((tmp_path / ".guard" / "pending").glob("*.json"))
    assert kept
    push = _guard(["track", "push", str(kept[-1]), "--tracking-uri", pg.uri], tmp_path)
    assert push.returncode == 0, push.stderr
    assert len(client.search_runs([exp.experiment_id], "tags.`guard.level` = 'result'")) == 2
