"""Dependency bumps: the suite before and after ``PKG==OLD -> PKG==NEW``, in isolated venvs.

Each side gets its own venv holding guard's pinned dependencies (pyproject.toml) with the
one pin replaced. guard itself is not installed there: the venv's Python imports this
source tree through PYTHONPATH, so both sides run the same instrument and only the
dependency differs. Venvs are cached by a key over (interpreter, the resolved
requirement list) and only reused when their install completed (a marker file).

Each side runs ``python -m guard.cli run SUITE --json ... --no-track`` in a subprocess in
its own work directory, so artefacts built against one version are never reused by the
other. The comparison's manifest diff gets the bumped package first, since a package
that is not a manifest pin (numpy) would otherwise not show at all.
"""

from __future__ import annotations

import hashlib
import os
import re
import subprocess
import sys
import tomllib
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from guard.bench.regress import RegressConfig
from guard.compare.compare import compare_docs, exit_code, load_results
from guard.compare.reports import write_reports
from guard.errors import UsageError

REPO_ROOT = Path(__file__).resolve().parents[2]
_PIN = re.compile(r"^([A-Za-z0-9][A-Za-z0-9._-]*)==([A-Za-z0-9][A-Za-z0-9.+!_-]*)$")
Runner = Callable[..., subprocess.CompletedProcess]


def _norm(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def parse_pin(text: str) -> tuple[str, str]:
    m = _PIN.match(text.strip())
    if not m:
        raise UsageError(f"{text!r} is not PKG==VERSION", hint="e.g. onnxruntime==1.31.1")
    return m.group(1), m.group(2)


def pinned_requirements(pyproject: Path = REPO_ROOT / "pyproject.toml") -> list[str]:
    try:
        data = tomllib.loads(pyproject.read_text())
    except (OSError, tomllib.TOMLDecodeError) as e:
        raise UsageError(f"cannot read guard's dependencies ({e})", where=str(pyproject)) from None
    return list(data.get("project", {}).get("dependencies", []))


def requirements_with(pin: str, base: Sequence[str]) -> list[str]:
    """``base`` with the pin's package replaced (or added when guard does not depend on it)."""
    name, _ = parse_pin(pin)
    out = [r for r in base if _norm(re.split(r"[<>=!~; \[]", r, maxsplit=1)[0]) != _norm(name)]
    return sorted([*out, pin], key=str.lower)


def env_key(python: str, requirements: Sequence[str]) -> str:
    h = hashlib.sha256()
    h.update(f"{python}\n{sys.version_info[:2]}\n".encode())
    h.update("\n".join(requirements).encode())
    return h.hexdigest()[:16]


def default_env_cache() -> Path:
    return Path(os.environ.get("GUARD_ENV_CACHE") or Path.home() / ".cache" / "guard" / "envs")


def _tail(text: str, n: int = 3) -> str:
    lines = [ln for ln in (text or "").strip().splitlines() if ln.strip()]
    return " | ".join(lines[-n:])


def ensure_env(
    pin: str,
    *,
    python: str = sys.executable,
    cache: Path | None = None,
    base_requirements: Sequence[str] | None = None,
    runner: Runner = subprocess.run,
) -> Path:
    """A venv with guard's pins and ``pin``; reused when a complete one is cached."""
    reqs = requirements_with(
        pin, base_requirements if base_requirements is not None else pinned_requirements()
    )
    env = (
        cache or default_env_cache()
    ) / f"{_norm(parse_pin(pin)[0])}-{parse_pin(pin)[1]}-{env_key(python, reqs)}"
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
    for cmd in steps:
        proc = runner(cmd, capture_output=True, text=True)
        if proc.returncode != 0:
            raise UsageError(
                f"could not build the environment for {pin}: `{' '.join(cmd[:4])} ...` failed: "
                f"{_tail(proc.stderr or proc.stdout)}",
                hint="Check that the version exists and is compatible with guard's other pins.",
            )
    (env / "requirements.txt").write_text("\n".join(reqs) + "\n")
    marker.write_text(pin + "\n")
    return env


def run_suite_in_env(
    env: Path,
    suite: Path,
    json_path: Path,
    *,
    workdir: Path,
    timeout_s: float = 1800.0,
    runner: Runner = subprocess.run,
) -> dict[str, Any]:
    """``guard run SUITE --json`` under the venv's interpreter; returns the results document."""
    workdir.mkdir(parents=True, exist_ok=True)
    json_path.parent.mkdir(parents=True, exist_ok=True)
    json_path.unlink(missing_ok=True)
    envvars = dict(os.environ)
    envvars["PYTHONPATH"] = os.pathsep.join(
        p for p in (str(REPO_ROOT), envvars.get("PYTHONPATH")) if p
    )
    envvars.pop("VIRTUAL_ENV", None)
    cmd = [str(env / "bin" / "python"), "-m", "guard.cli", "run", str(suite.resolve()),
           "--json", str(json_path.resolve()), "--no-track"]  # fmt: skip
    try:
        proc = runner(
            cmd, cwd=str(workdir), env=envvars, capture_output=True, text=True, timeout=timeout_s
        )
    except subprocess.TimeoutExpired:
        raise UsageError(
            f"the suite run in {env.name} took longer than {timeout_s:.0f} s"
        ) from None
    # Exit 1 (a check failed) still wrote results; 2 and 3 mean there is nothing to compare.
    if proc.returncode not in (0, 1) or not json_path.is_file():
        raise UsageError(
            f"`guard run` in {env.name} exited {proc.returncode}: {_tail(proc.stderr or proc.stdout)}",
            where=str(suite),
        )
    return load_results(json_path)


def run_bump(
    old: str,
    new: str,
    suite: Path,
    *,
    config: RegressConfig | None = None,
    env_cache: Path | None = None,
    out_dir: Path = Path(".guard/bump"),
    python: str = sys.executable,
    timeout_s: float = 1800.0,
    strict: bool = False,
    runner: Runner = subprocess.run,
    base_requirements: Sequence[str] | None = None,
) -> tuple[dict[str, Any], int]:
    """Build both envs, run the suite in each, compare; returns (comparison, exit code).

    Writes ``<out_dir>/<pkg>-<old>-<new>/{base,head}.json`` and ``bump.{json,md,html}``.
    """
    (name_a, v_old), (name_b, v_new) = parse_pin(old), parse_pin(new)
    if _norm(name_a) != _norm(name_b):
        raise UsageError(f"both pins must name one package, got {name_a} and {name_b}")
    if v_old == v_new:
        raise UsageError(f"{old} and {new} are the same version: nothing to compare")
    if not suite.is_file():
        raise UsageError("no such suite file", where=str(suite))
    out = out_dir / f"{_norm(name_a)}-{v_old}-{v_new}"
    docs = []
    envs = {}
    for label, pin in (("base", old), ("head", new)):
        env = ensure_env(
            pin, python=python, cache=env_cache, base_requirements=base_requirements, runner=runner
        )
        envs[label] = str(env)
        docs.append(run_suite_in_env(env, suite, out / f"{label}.json", workdir=out / f"work-{label}",
                                     timeout_s=timeout_s, runner=runner))  # fmt: skip
    cmp = compare_docs(docs[0], docs[1], config, base_label=old, head_label=new)
    # The bumped package leads the manifest diff even when the manifest does not pin it.
    cmp["manifest_diff"] = {f"package.{_norm(name_a)}": [v_old, v_new], **cmp["manifest_diff"]}
    cmp["bump"] = {"package": name_a, "old": v_old, "new": v_new, "envs": envs, "suite": str(suite)}
    title = f"guard bump {old} → {new}"
    write_reports(
        cmp,
        json_path=out / "bump.json",
        md_path=out / "bump.md",
        html_path=out / "bump.html",
        title=title,
    )
    return cmp, exit_code(cmp, strict=strict)
