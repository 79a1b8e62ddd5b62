"""``guard ab SUITE --base-ref REF``: two commits, one runner, interleaved, paired.

Per-commit gating must compare a change with its base *on the same runner at the same
time*: two results files from two processes (or two runners) differ by more than most
regressions. So each side gets:

- its source: ``git archive`` of the ref into ``<cache>/src-<sha>`` (the working tree
  itself for a side with no ref), cached by commit;
- its environment: the side's pinned dependencies (``[project].dependencies`` of its
  pyproject.toml). When they equal the running interpreter's pins, that interpreter is
  used; otherwise a venv is built as ``guard bump`` builds them (guard.experiment.bump,
  cached by the requirement list);
- its guard: a side whose tree is guard itself (``guard/__init__.py`` and a pyproject
  naming project ``guard``) runs that tree's guard, first on ``PYTHONPATH``; any other
  repository (a team's suites and models) runs this guard on both sides;
- a worker process (guard/experiment/ab_worker.py) that builds and loads the side's cases,
  pinned, like the other side's, to the same first ``threads`` cores (``measuring_cpus``).

The coordinator then times the two workers' cases in alternating pairs (AB, BA, ...) with
``guard ab``'s adaptive paired statistics (guard.stats.regress.measure_until_conclusive),
and writes the same comparison document as ``guard ab``.
"""

from __future__ import annotations

import base64
import io
import json
import os
import shutil
import subprocess
import sys
import tarfile
import tempfile
import tomllib
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import numpy as np

from guard.compare.compare import host_incompatibility
from guard.compare.written import ComparisonDocumentJson
from guard.core.errors import InternalError, UsageError
from guard.core.json_types import JsonObject
from guard.counting.rows import CountedRowJson, counted_row
from guard.experiment.ab import ABOutcome, CaseFacts, ab_document, ab_row
from guard.experiment.bump import (
    REPO_ROOT,
    default_env_cache,
    ensure_env,
    last_lines,
    pinned_requirements,
)
from guard.measure.preflight import THREAD_ENV_VARS, contention_between, read_cpu_times
from guard.measure.round_runner import measuring_cpus
from guard.results.counted import Counted
from guard.results.record import Record
from guard.results.result import Result
from guard.stats.regress import RegressConfig, measure_until_conclusive, with_noise

# Run by path from this tree, under the side's interpreter. ``-P``: the script's folder is
# not put first on sys.path, where this package's bisect.py would shadow the standard
# library's bisect for the side's libraries.
WORKER = Path(__file__).with_name("ab_worker.py")


def _git(repo: Path, *args: str) -> str:
    try:
        proc = subprocess.run(["git", *args], cwd=repo, capture_output=True, text=True, timeout=120)
    except (OSError, subprocess.SubprocessError) as exc:
        raise UsageError(f"git {' '.join(args)} failed: {exc}", where=str(repo)) from None
    if proc.returncode != 0:
        raise UsageError(
            f"git {' '.join(args)}: {last_lines(proc.stderr or proc.stdout, 1)}",
            where=str(repo),
            hint="Fetch the ref first (CI: actions/checkout with fetch-depth: 0).",
        )
    return proc.stdout.strip()


def repo_root(path: Path) -> Path:
    return Path(_git(path if path.is_dir() else path.parent, "rev-parse", "--show-toplevel"))


def resolve_ref(repo: Path, ref: str) -> str:
    return _git(repo, "rev-parse", "--verify", "--quiet", f"{ref}^{{commit}}")


def checkout(repo: Path, sha: str, cache: Path) -> Path:
    """The tree of commit ``sha``, extracted once into ``cache`` (complete or absent)."""
    dest = cache / f"src-{sha[:16]}"
    if (dest / ".guard-complete").is_file():
        return dest
    cache.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".src-{sha[:16]}.", dir=cache))
    proc = subprocess.run(
        ["git", "archive", "--format=tar", sha], cwd=repo, capture_output=True, timeout=600
    )
    if proc.returncode != 0:
        raise UsageError(
            f"git archive {sha[:12]}: {last_lines(proc.stderr.decode(errors='replace'))}",
            where=str(repo),
        )
    with tarfile.open(fileobj=io.BytesIO(proc.stdout)) as tar:
        tar.extractall(tmp, filter="data")
    (tmp / ".guard-complete").write_text(sha + "\n")
    if dest.exists():
        shutil.rmtree(dest)
    os.replace(tmp, dest)
    return dest


def _pyproject(src: Path) -> JsonObject:
    """The side's pyproject.toml as parsed (a TOML document: free-form, as JSON is)."""
    p = src / "pyproject.toml"
    try:
        return tomllib.loads(p.read_text()) if p.is_file() else {}
    except (OSError, tomllib.TOMLDecodeError) as e:
        raise UsageError(f"cannot read its dependencies ({e})", where=str(p)) from None


def is_guard_tree(src: Path) -> bool:
    return (src / "guard" / "__init__.py").is_file() and _pyproject(src).get("project", {}).get(
        "name"
    ) == "guard"


@dataclass
class Side:
    label: str
    src: Path  # the side's tree (suite paths resolve in it)
    python: str  # the interpreter that runs its worker
    guard_src: Path  # first on PYTHONPATH: the guard this side runs
    sha: str | None = None
    env: str | None = None  # the venv built for it, when its pins differ


def make_side(
    label: str, src: Path, sha: str | None, *, python: str, env_cache: Path, runner: Any = None
) -> Side:
    """The side's interpreter and guard (see the module docstring)."""
    guard_src = src if is_guard_tree(src) else REPO_ROOT
    reqs = pinned_requirements(src / "pyproject.toml") if _pyproject(src) else []
    if not reqs or sorted(reqs) == sorted(pinned_requirements()):
        return Side(label, src, python, guard_src, sha)
    env = ensure_env(
        reqs, label=f"ref-{(sha or 'worktree')[:12]}", python=python, cache=env_cache, runner=runner
    )
    return Side(label, src, str(env / "bin" / "python"), guard_src, sha, str(env))


@dataclass(frozen=True, kw_only=True)
class CaseDescription(Result):
    """A case as a worker describes it (guard.experiment.ab_worker): the result fields it
    knows (model, backend, target, manifest, partitions, arena_bytes), the suite's latency
    threshold for it, and its outputs as a base64 .npz."""

    regress_pct: float | None = None
    outputs_npz: str | None = None


@dataclass(frozen=True, kw_only=True)
class CountReply(Record):
    """A worker's ``count`` reply: the case's counted block, what was missing to count it,
    and the counted bound the suite sets."""

    counted: Counted | None = None
    missing: tuple[str, ...] = ()
    regress_pct: float | None = None


@dataclass
class WorkerProc:
    side: Side
    proc: subprocess.Popen
    log: Any
    cases: list[CaseDescription] = field(default_factory=list)

    @classmethod
    def start(cls, side: Side, threads: int) -> WorkerProc:
        env = dict(os.environ)
        env["PYTHONPATH"] = os.pathsep.join(
            p for p in (str(side.guard_src), env.get("PYTHONPATH")) if p
        )
        env.pop("VIRTUAL_ENV", None)
        for k in THREAD_ENV_VARS:
            env[k] = str(threads)
        log = tempfile.TemporaryFile(mode="w+")
        proc = subprocess.Popen(
            [side.python, "-P", str(WORKER)],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=log,
            text=True,
            env=env,
            cwd=str(side.src),
        )
        cpus = measuring_cpus(threads)
        if cpus:
            os.sched_setaffinity(proc.pid, cpus)
        return cls(side, proc, log)

    def ask(self, **req: Any) -> JsonObject:
        """The worker's reply to ``req`` as parsed (its side's guard, whatever its version,
        wrote it): the caller reads what it asked for."""
        assert self.proc.stdin is not None and self.proc.stdout is not None
        try:
            self.proc.stdin.write(json.dumps(req) + "\n")
            self.proc.stdin.flush()
            line = self.proc.stdout.readline()
        except BrokenPipeError:
            line = ""
        if not line:
            self.log.seek(0)
            raise InternalError(
                f"the {self.side.label} worker died: {last_lines(self.log.read()) or 'no output'}"
            )
        reply = json.loads(line)
        if not reply.pop("ok"):
            cls = UsageError if reply.get("kind") == "usage" else InternalError
            raise cls(f"{self.side.label} side: {reply['error']}")
        return reply

    def close(self) -> None:
        try:
            if self.proc.poll() is None and self.proc.stdin is not None:
                self.proc.stdin.write(json.dumps({"op": "quit"}) + "\n")
                self.proc.stdin.flush()
            self.proc.wait(timeout=30)
        except (OSError, subprocess.TimeoutExpired):
            self.proc.kill()
            self.proc.wait()
        self.log.close()


def _outputs(npz_b64: str | None) -> list[np.ndarray] | None:
    if npz_b64 is None:
        return None
    with np.load(io.BytesIO(base64.b64decode(npz_b64))) as z:
        return [z[f"arr_{i}"] for i in range(len(z.files))]


def _facts(c: CaseDescription) -> CaseFacts:
    """What ``case_facts`` says of a case, for a case a worker described (its manifest,
    partitions and arena, and its outputs)."""
    result = Result(manifest=c.manifest, partitions=c.partitions, arena_bytes=c.arena_bytes)
    return CaseFacts(result, _outputs(c.outputs_npz))


def _pair(
    wb: WorkerProc,
    wh: WorkerProc,
    ib: int,
    ih: int,
    cfg: RegressConfig,
    budget_s: float,
    warmup_s: float,
    min_sample_s: float,
) -> ABOutcome:
    inner = min(
        wb.ask(op="warm", case=ib, seconds=warmup_s, min_sample_s=min_sample_s)["inner"],
        wh.ask(op="warm", case=ih, seconds=warmup_s, min_sample_s=min_sample_s)["inner"],
    )
    count = [0]

    def sample(n: int) -> tuple[list[float], list[float]]:
        b, h = [], []
        for _ in range(n):
            if count[0] % 2 == 0:
                tb = wb.ask(op="time", case=ib, inner=inner)["ms"]
                th = wh.ask(op="time", case=ih, inner=inner)["ms"]
            else:
                th = wh.ask(op="time", case=ih, inner=inner)["ms"]
                tb = wb.ask(op="time", case=ib, inner=inner)["ms"]
            count[0] += 1
            b.append(tb)
            h.append(th)
        return b, h

    workers_cpu = [wb.ask(op="cpu")["cpu_s"] + wh.ask(op="cpu")["cpu_s"]]
    before = read_cpu_times()
    res = measure_until_conclusive(sample, config=cfg, budget_s=budget_s, initial=50, max_looks=7)
    after = read_cpu_times()
    workers_cpu.append(wb.ask(op="cpu")["cpu_s"] + wh.ask(op="cpu")["cpu_s"])
    # The workers' CPU is ours, not a co-tenant's.
    if before is not None and after is not None:
        own = workers_cpu[1] - workers_cpu[0]
        after = replace(after, own_s=after.own_s + own)
    return ABOutcome(res, inner, contention_between(before, after))


def _count_pairs(
    wb: WorkerProc, wh: WorkerProc, pairs: list[tuple[int, int]], missing: list[str]
) -> list[CountedRowJson]:
    """Counted rows: each side's case counted by its worker, compared as guard compare does."""
    from guard.counting.verdict import DEFAULT_COUNTED_REGRESS_PCT, compare_counted

    rows: list[CountedRowJson] = []
    for ib, ih in pairs:
        b = CountReply.from_json(wb.ask(op="count", case=ib))
        h = CountReply.from_json(wh.ask(op="count", case=ih))
        if b.missing or h.missing:
            missing.extend((b.missing or h.missing)[:1])
            return []
        bound = h.regress_pct or b.regress_pct or DEFAULT_COUNTED_REGRESS_PCT
        row = compare_counted(b.counted, h.counted, float(bound))
        bc = wb.cases[ib]
        # the head's block, else the base's (an empty block says nothing)
        counted_on = next((c.target for c in (h.counted, b.counted) if c and c.to_json()), None)
        rows.append(counted_row(bc.model, bc.backend, bc.target, counted_on, row))
    return rows


def run_ref_ab(
    suite: Path,
    base_ref: str,
    head_ref: str | None = None,
    *,
    config: RegressConfig,
    noise: dict[str, float] | None = None,
    budget_s: float = 20.0,
    warmup_s: float = 0.5,
    min_sample_s: float = 1e-3,
    suite_thresholds: bool = True,
    env_cache: Path | None = None,
    python: str = sys.executable,
    threads: int = 1,
    runner: Any = None,
    counted: bool = False,
    missing: list[str] | None = None,
) -> ComparisonDocumentJson:
    """Interleaved A/B of SUITE at ``base_ref`` against ``head_ref`` (or the working tree).

    ``counted``: each side's worker also counts its cases (guard.run.counted, by the side's
    own guard) and the document gains ``counted`` rows; a missing emulator or compiler is
    appended to ``missing`` and leaves no rows."""
    if not suite.is_file():
        raise UsageError("no such suite file", where=str(suite))
    repo = repo_root(suite.resolve())
    rel = suite.resolve().relative_to(repo)
    cache = env_cache or default_env_cache()
    src_cache = cache.parent / "src"
    sides = []
    for label, ref in (("base", base_ref), ("head", head_ref)):
        if ref is None:
            sides.append(
                make_side(label, repo, None, python=python, env_cache=cache, runner=runner)
            )
            continue
        sha = resolve_ref(repo, ref)
        sides.append(
            make_side(
                label,
                checkout(repo, sha, src_cache),
                sha,
                python=python,
                env_cache=cache,
                runner=runner,
            )
        )
    for s in sides:
        if not (s.src / rel).is_file():
            raise UsageError(
                f"{rel} does not exist at {s.label} ({s.sha or 'working tree'})",
                where=str(suite),
                hint="A/B a suite both commits have.",
            )
    workers: list[WorkerProc] = []
    try:
        for s in sides:
            w = WorkerProc.start(s, threads)
            workers.append(w)
            work = (cache.parent / "ab" / (s.sha[:16] if s.sha else "worktree")).resolve()
            work.mkdir(parents=True, exist_ok=True)
            prepared = w.ask(op="prepare", suite=str(s.src / rel), workdir=str(work))
            w.cases = [CaseDescription.from_json(c) for c in prepared["cases"]]
        wb, wh = workers
        heads = {c.key: i for i, c in enumerate(wh.cases)}
        pairs = [(i, heads[c.key]) for i, c in enumerate(wb.cases) if c.key in heads]
        if not pairs:
            raise UsageError(f"{rel}: base and head share no (model, backend, target)")
        rows = []
        for ib, ih in pairs:
            bc, hc = wb.cases[ib], wh.cases[ih]
            key = bc.key
            why = host_incompatibility(bc.manifest, hc.manifest)
            if why:
                raise UsageError(f"{key}: cannot A/B across hosts: {why}")
            cfg = config
            if suite_thresholds and hc.regress_pct is not None:
                cfg = replace(cfg, regress_pct=float(hc.regress_pct))
            cfg = with_noise(cfg, (noise or {}).get(str(key)))
            outcome = _pair(wb, wh, ib, ih, cfg, budget_s, warmup_s, min_sample_s)
            rows.append(ab_row(key, outcome, _facts(bc), _facts(hc)))
        counted_rows = (
            _count_pairs(wb, wh, pairs, missing if missing is not None else []) if counted else []
        )
    finally:
        for w in workers:
            w.close()
    labels = tuple(
        f"{r} ({s.sha[:12]})" if s.sha else "working tree"
        for r, s in zip((base_ref, head_ref), sides, strict=True)
    )
    doc = ab_document(rows, config, (labels[0], labels[1]))
    doc["mode"] = "interleaved-ab-refs"
    if counted:
        from guard.counting.rows import summary

        doc["counted"] = counted_rows
        doc["summary"]["counted"] = summary(counted_rows)
    doc["refs"] = {
        s.label: {
            "ref": r,
            "sha": s.sha,
            "guard": str(s.guard_src),
            "python": s.python,
            "env": s.env,
        }
        for r, s in zip((base_ref, head_ref), sides, strict=True)
    }
    return doc
