"""Exact pins: ``PKG==VERSION`` arguments, CI's lock (constraints/ci.txt), and guard's own
dependency ranges pinned to that lock, as a bump environment installs them."""

from __future__ import annotations

import re
import tomllib
from collections.abc import Sequence
from pathlib import Path

from guard.core.errors import UsageError

REPO_ROOT = Path(__file__).resolve().parents[2]
_PIN = re.compile(r"^([A-Za-z0-9][A-Za-z0-9._-]*)==([A-Za-z0-9][A-Za-z0-9.+!_-]*)$")


def _norm(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def parse_pin(text: str) -> tuple[str, str]:
    m = _PIN.match(text.strip())
    if not m:
        raise UsageError(f"{text!r} is not PKG==VERSION", hint="e.g. onnxruntime==1.31.1")
    return m.group(1), m.group(2)


LOCK = Path("constraints") / "ci.txt"
# The extras a bump environment holds too (their backends are in the suites it runs).
BUMP_EXTRAS = ("tvm", "openvino")


def read_lock(path: Path) -> dict[str, str]:
    """{normalised name: version} of a constraints file's ``NAME==VERSION`` lines."""
    try:
        text = path.read_text()
    except OSError as e:
        raise UsageError(f"cannot read the constraints file ({e})", where=str(path)) from None
    out = {}
    for line in text.splitlines():
        m = _PIN.match(line.split("#", 1)[0].strip())
        if m:
            out[_norm(m.group(1))] = m.group(2)
    return out


def pinned_requirements(
    pyproject: Path = REPO_ROOT / "pyproject.toml", lock: Path | None = None
) -> list[str]:
    """guard's runtime dependencies and the tvm/openvino extras, each pinned to the exact
    version of ``lock`` (default: constraints/ci.txt beside ``pyproject``) where it has one:
    pyproject declares ranges, a bump environment needs one exact set."""
    try:
        data = tomllib.loads(pyproject.read_text())
    except (OSError, tomllib.TOMLDecodeError) as e:
        raise UsageError(f"cannot read guard's dependencies ({e})", where=str(pyproject)) from None
    project = data.get("project", {})
    extras = project.get("optional-dependencies", {})
    reqs = [*project.get("dependencies", []), *(r for x in BUMP_EXTRAS for r in extras.get(x, []))]
    lock = lock if lock is not None else pyproject.parent / LOCK
    pins = read_lock(lock) if lock.is_file() else {}
    out = []
    for r in reqs:
        head = re.split(r"[<>=!~; ]", r, maxsplit=1)[0]  # the name, with its [extra]
        version = pins.get(_norm(head.split("[")[0]))
        out.append(f"{head}=={version}" if version else r)
    return out


def requirements_with(pin: str, base: Sequence[str]) -> list[str]:
    """``base`` with the pin's package replaced (or added when guard does not depend on it)."""
    name, _ = parse_pin(pin)
    out = [r for r in base if _norm(re.split(r"[<>=!~; \[]", r, maxsplit=1)[0]) != _norm(name)]
    return sorted([*out, pin], key=str.lower)


def changed_pins(
    base: Sequence[str], head: Sequence[str]
) -> list[tuple[str, str | None, str | None]]:
    """(package, old, new) for every exact pin that differs; None where a side lacks it."""

    def pins(reqs: Sequence[str]) -> dict[str, tuple[str, str]]:
        out = {}
        for r in reqs:
            m = _PIN.match(r.strip())
            if m:
                out[_norm(m.group(1))] = (m.group(1), m.group(2))
        return out

    b, h = pins(base), pins(head)
    return [
        ((h[k] if k in h else b[k])[0], b[k][1] if k in b else None, h[k][1] if k in h else None)
        for k in sorted(set(b) | set(h))
        if b.get(k, (None, None))[1] != h.get(k, (None, None))[1]
    ]
