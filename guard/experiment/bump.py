"""Dependency bumps: the suite before and after ``PKG==OLD -> PKG==NEW``, in isolated venvs.

Each side gets its own venv holding guard's dependencies (pyproject.toml's ranges, each
pinned to CI's lock, constraints/ci.txt) with the one pin replaced. guard itself is not installed there: the venv's Python imports this
source tree through PYTHONPATH, so both sides run the same instrument and only the
dependency differs. Venvs are cached by a key over (interpreter, the resolved
requirement list) and only reused when their install completed (a marker file).

Each side runs ``python -m guard.cli.main run SUITE --json ... --no-track`` in a subprocess in
its own work directory, so artefacts built against one version are never reused by the
other. The comparison's manifest diff gets the bumped package first, since a package
that is not a manifest pin (numpy) would otherwise not show at all.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import re
import shutil
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import TypedDict, Unpack

from guard.compare.compare import compare_docs, exit_code
from guard.compare.reports import write_reports
from guard.compare.written import ComparisonDocumentJson
from guard.core.errors import UsageError
from guard.core.user_cache import cache_root, tree_bytes
from guard.experiment.pins import (  # noqa: F401  (bump.X for the CLI and ab --base-ref)
    BUMP_EXTRAS,
    LOCK,
    REPO_ROOT,
    _norm,
    changed_pins,
    parse_pin,
    pinned_requirements,
    read_lock,
    requirements_with,
)
from guard.results.documents import ComparisonDocument, ResultsDocument
from guard.results.load import read_results
from guard.results.record import Json
from guard.results.result import Result
from guard.stats.regress import RegressConfig

Runner = Callable[..., subprocess.CompletedProcess]


def env_key(python: str, requirements: Sequence[str]) -> str:
    h = hashlib.sha256()
    h.update(f"{python}\n{sys.version_info[:2]}\n".encode())
    h.update("\n".join(requirements).encode())
    return h.hexdigest()[:16]


def default_env_cache() -> Path:
    """``$GUARD_ENV_CACHE``, else ``envs/`` in guard's cache (guard.core.user_cache)."""
    return Path(os.environ.get("GUARD_ENV_CACHE") or cache_root() / "envs")


def _stderr(line: str) -> None:
    print(line, file=sys.stderr, flush=True)


HEARTBEAT_S = 30.0  # a line this often while an environment builds: minutes of pip


@contextlib.contextmanager
def heartbeat(
    what: str,
    say: Callable[[str], None] = _stderr,
    every_s: float = HEARTBEAT_S,
    clock: Callable[[], float] = time.monotonic,
) -> Iterator[None]:
    """Say ``what`` now and every ``every_s`` seconds until the block ends, with the time so
    far: a step that takes minutes and prints nothing looks hung."""
    t0 = clock()
    say(f"guard bump: {what} ...")
    stop = threading.Event()

    def beat() -> None:
        while not stop.wait(every_s):
            say(f"guard bump: {what}: still working ({clock() - t0:.0f} s)")

    thread = threading.Thread(target=beat, name="guard-bump-heartbeat", daemon=True)
    thread.start()
    try:
        yield
    finally:
        stop.set()
        thread.join()
    say(f"guard bump: {what}: done in {clock() - t0:.0f} s")


def last_lines(text: str, n: int = 3) -> str:
    """The last ``n`` non-empty lines of a tool's output, joined: what an error shows."""
    lines = [ln for ln in (text or "").strip().splitlines() if ln.strip()]
    return " | ".join(lines[-n:])


def ensure_env(
    requirements: Sequence[str],
    *,
    label: str,
    python: str = sys.executable,
    cache: Path | None = None,
    runner: Runner | None = None,
    say: Callable[[str], None] = _stderr,
    every_s: float = HEARTBEAT_S,
) -> Path:
    """A venv holding exactly ``requirements``; reused when a complete one is cached. While
    it builds, a heartbeat line every ``every_s`` seconds says so."""
    reqs = sorted(requirements, key=str.lower)
    env = (
        cache or default_env_cache()
    ) / f"{re.sub(r'[^A-Za-z0-9.+-]+', '-', label)}-{env_key(python, reqs)}"
    marker = env / ".guard-complete"
    if marker.is_file():
        return env
    env.parent.mkdir(parents=True, exist_ok=True)
    steps = [
        [python, "-m", "venv", "--clear", str(env)],
        [
            str(env / "bin" / "python"),
            "-m",
            "pip",
            "install",
            "--disable-pip-version-check",
            "-q",
            *reqs,
        ],
    ]
    for cmd, what in zip(steps, (f"creating the {label} environment in {env}",
                                 f"installing {len(reqs)} packages into it (pip; minutes the "
                                 "first time)"), strict=True):  # fmt: skip
        with heartbeat(what, say, every_s):
            proc = (runner or subprocess.run)(cmd, capture_output=True, text=True)
        if proc.returncode != 0:
            raise UsageError(
                f"could not build the environment for {label}: `{' '.join(cmd[:4])} ...` failed: "
                f"{last_lines(proc.stderr or proc.stdout)}",
                hint="Check that the version exists and is compatible with guard's other pins.",
            )
    (env / "requirements.txt").write_text("\n".join(reqs) + "\n")
    marker.write_text(label + "\n")
    return env


def run_suite_in_env(
    env: Path,
    suite: Path,
    json_path: Path,
    *,
    workdir: Path,
    timeout_s: float = 1800.0,
    runner: Runner | None = None,
    counted: bool = False,
) -> ResultsDocument:
    """``guard run SUITE --json`` under the venv's interpreter; returns the results document.

    ``counted`` adds ``--counted``: each result's instructions and bytes moved per inference.
    """
    workdir.mkdir(parents=True, exist_ok=True)
    json_path.parent.mkdir(parents=True, exist_ok=True)
    json_path.unlink(missing_ok=True)
    envvars = dict(os.environ)
    envvars["PYTHONPATH"] = os.pathsep.join(
        p for p in (str(REPO_ROOT), envvars.get("PYTHONPATH")) if p
    )
    envvars.pop("VIRTUAL_ENV", None)
    cmd = [str(env / "bin" / "python"), "-m", "guard.cli.main", "run", str(suite.resolve()),
           "--json", str(json_path.resolve()), "--no-track",
           *(["--counted"] if counted else [])]  # fmt: skip
    try:
        proc = (runner or subprocess.run)(
            cmd, cwd=str(workdir), env=envvars, capture_output=True, text=True, timeout=timeout_s
        )
    except subprocess.TimeoutExpired:
        raise UsageError(
            f"the suite run in {env.name} took longer than {timeout_s:.0f} s"
        ) from None
    # Exit 1 (a check failed) still wrote results; 2 and 3 mean there is nothing to compare.
    if proc.returncode not in (0, 1) or not json_path.is_file():
        raise UsageError(
            f"`guard run` in {env.name} exited {proc.returncode}: {last_lines(proc.stderr or proc.stdout)}",
            where=str(suite),
        )
    return read_results(json_path)


def merge_rounds(docs: Sequence[ResultsDocument]) -> ResultsDocument:
    """One results document from several runs of a side: raw samples and rounds pooled.

    Each run's rounds join the side's rounds, so the comparison's independent units span
    every process of that side.
    """
    first = docs[0]
    pooled = [_Pooled(r) for r in first.results]
    by_key = {p.first.key: p for p in pooled}
    for d in docs[1:]:
        for r in d.results:
            into = by_key.get(r.key)
            if into is not None:
                into.add(r)
    merged = first.to_json()
    merged["results"] = [p.to_json() for p in pooled]
    merged["rounds"] = len(docs)
    return ResultsDocument.from_json(merged)


class _Pooled:
    """A result of a side's first run, and what its later runs add to it."""

    def __init__(self, first: Result) -> None:
        self.first = first
        self.samples_ms = list(first.samples_ms)
        self.rounds = [rd.to_json() for rd in first.rounds]
        self.counted = first.counted

    def add(self, r: Result) -> None:
        self.samples_ms += r.samples_ms
        if r.rounds and self.first.rounds:
            self.rounds += [rd.to_json() for rd in r.rounds]
        if self.counted is None:  # counted in one run of the side
            self.counted = r.counted

    def to_json(self) -> dict[str, Json]:
        out = self.first.to_json()
        if len(self.samples_ms) > len(self.first.samples_ms):
            out["samples_ms"] = self.samples_ms
        if self.first.rounds:
            out["rounds"] = self.rounds
        if self.counted is not None and self.first.counted is None:
            out["counted"] = self.counted.to_json()
        return out


def read_requirements(path: Path) -> list[str]:
    """The pinned requirements of a pyproject.toml (with the lock beside it), or of a
    constraints file (guard's dependencies, pinned by it)."""
    if not path.is_file():
        raise UsageError("no such pyproject or constraints file", where=str(path))
    if path.suffix == ".txt":
        return pinned_requirements(REPO_ROOT / "pyproject.toml", lock=path)
    return pinned_requirements(path)


class BumpOptions(TypedDict, total=False):
    """``run_bump_requirements``' options, as ``guard bump`` passes them on."""

    config: RegressConfig | None
    env_cache: Path | None
    out_dir: Path
    python: str
    timeout_s: float
    strict: bool
    rounds: int
    keep_envs: bool
    counted: bool


def run_bump(
    old: str,
    new: str,
    suite: Path,
    *,
    base_requirements: Sequence[str] | None = None,
    **kw: Unpack[BumpOptions],
) -> tuple[ComparisonDocumentJson, int]:
    """``PKG==OLD`` vs ``PKG==NEW`` on top of guard's other pins (see run_bump_requirements)."""
    (name_a, v_old), (name_b, v_new) = parse_pin(old), parse_pin(new)
    if _norm(name_a) != _norm(name_b):
        raise UsageError(f"both pins must name one package, got {name_a} and {name_b}")
    if v_old == v_new:
        raise UsageError(f"{old} and {new} are the same version: nothing to compare")
    reqs = list(base_requirements) if base_requirements is not None else pinned_requirements()
    return run_bump_requirements(
        requirements_with(old, reqs), requirements_with(new, reqs), suite, **kw
    )


def run_bump_requirements(
    base_reqs: Sequence[str],
    head_reqs: Sequence[str],
    suite: Path,
    *,
    config: RegressConfig | None = None,
    env_cache: Path | None = None,
    out_dir: Path = Path(".guard/bump"),
    python: str = sys.executable,
    timeout_s: float = 1800.0,
    strict: bool = False,
    rounds: int = 2,
    runner: Runner | None = None,
    keep_envs: bool = False,
    counted: bool = False,
    say: Callable[[str], None] = _stderr,
    every_s: float = HEARTBEAT_S,
) -> tuple[ComparisonDocumentJson, int]:
    """Build both envs, run the suite ``rounds`` times per side (ABBA...), compare.

    Returns (comparison, exit code). Writes ``<out_dir>/<name>/{base,head}-<i>.json`` and
    ``bump.{json,md,html}``, where the name spells the changed pins. The envs (a GB or
    more each) are removed at the end, whatever happened, unless ``keep_envs`` (then the
    next bump of the same pins reuses them). ``counted``: each side's first run also
    counts instructions and bytes moved per inference (counts need no rounds: they do not
    move between processes), so the comparison gains its counted rows.
    """
    changes = changed_pins(base_reqs, head_reqs)
    if not changes:
        raise UsageError("the two requirement sets pin the same versions: nothing to compare")
    if not suite.is_file():
        raise UsageError("no such suite file", where=str(suite))
    name = "+".join(f"{_norm(p)}-{o}-{n}" for p, o, n in changes)[:120]
    out = out_dir / name
    envs: dict[str, Path] = {}
    try:
        for label, reqs in (("base", base_reqs), ("head", head_reqs)):
            side = "+".join(
                f"{_norm(p)}=={(o if label == 'base' else n) or 'none'}" for p, o, n in changes
            )[:80]
            envs[label] = ensure_env(reqs, label=side, python=python, cache=env_cache,
                                     runner=runner, say=say, every_s=every_s)  # fmt: skip
        return _measure_bump(envs, changes, suite, out, config=config, timeout_s=timeout_s,
                             strict=strict, rounds=rounds, runner=runner, say=say,
                             every_s=every_s, counted=counted)  # fmt: skip
    finally:
        if not keep_envs:
            _remove_envs(envs, say)


def _remove_envs(envs: dict[str, Path], say: Callable[[str], None]) -> None:
    """Remove the bump's venvs (built or reused), saying how much that freed."""
    gone = [e for e in envs.values() if e.is_dir()]
    if not gone:
        return
    freed = sum(tree_bytes(e) for e in gone)
    for e in gone:
        shutil.rmtree(e, ignore_errors=True)
    say(f"guard bump: removed {len(gone)} environment(s), {freed / 2**30:.2f} GiB "
        "(--keep-envs keeps them for the next bump of the same pins)")  # fmt: skip


def _measure_bump(
    envs: dict[str, Path],
    changes: list[tuple[str, str | None, str | None]],
    suite: Path,
    out: Path,
    *,
    config: RegressConfig | None,
    timeout_s: float,
    strict: bool,
    rounds: int,
    runner: Runner | None,
    say: Callable[[str], None],
    every_s: float,
    counted: bool = False,
) -> tuple[ComparisonDocumentJson, int]:
    """The suite run ``rounds`` times per side in the built envs, compared and reported."""
    # ABBA order: a machine that gets busier (or quieter) during the bump hits both sides
    # alike, instead of landing on whichever ran second.
    runs: dict[str, list[ResultsDocument]] = {"base": [], "head": []}
    for i in range(rounds):
        for label in ("base", "head") if i % 2 == 0 else ("head", "base"):
            with heartbeat(f"run {i + 1} of {rounds}: the suite on {label}", say, every_s):
                runs[label].append(
                    run_suite_in_env(envs[label], suite, out / f"{label}-{i}.json",
                                     workdir=out / f"work-{label}", timeout_s=timeout_s,
                                     runner=runner, counted=counted and i == 0)
                )  # fmt: skip
    docs = [merge_rounds(runs["base"]), merge_rounds(runs["head"])]
    pins = [f"{p}=={o}" if o else f"{p} (absent)" for p, o, _ in changes]
    new_pins = [f"{p}=={n}" if n else f"{p} (absent)" for p, _, n in changes]
    cmp = compare_docs(
        docs[0], docs[1], config, base_label=", ".join(pins), head_label=", ".join(new_pins)
    )
    # The bumped packages lead the manifest diff even when the manifest does not pin them.
    bumped = {f"package.{_norm(p)}": [o, n] for p, o, n in changes}
    cmp["manifest_diff"] = {**bumped, **cmp["manifest_diff"]}
    cmp["bump"] = {
        "changes": [{"package": p, "old": o, "new": n} for p, o, n in changes],
        "envs": {k: str(v) for k, v in envs.items()},
        "suite": str(suite),
        "rounds": rounds,
    }
    title = f"guard bump {', '.join(pins)} → {', '.join(new_pins)}"
    write_reports(
        cmp,
        json_path=out / "bump.json",
        md_path=out / "bump.md",
        html_path=out / "bump.html",
        title=title,
    )
    return cmp, exit_code(ComparisonDocument.from_json(cmp), strict=strict)
