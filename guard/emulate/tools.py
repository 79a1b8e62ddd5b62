"""The tools emulated verification needs, per target architecture, and where they come from.

Each tool names the Debian package that ships it, so a missing one is one line a user can
act on (``apt-get install -y qemu-user-static``), never a traceback from subprocess.
"""

from __future__ import annotations

import functools
import os
import platform
import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path

from guard.core.errors import UsageError

_MACHINE = {"x86_64": "x86_64", "amd64": "x86_64", "aarch64": "aarch64", "arm64": "aarch64"}


@dataclass(frozen=True)
class Toolchain:
    """The emulator and cross compiler for one target architecture, with their packages."""

    arch: str
    triple: str  # the GNU triple of the cross toolchain
    emulator: str
    emulator_package: str
    compiler: str
    compiler_package: str
    libc_package: str  # the static C library the runner links against


TOOLCHAINS = {
    "aarch64": Toolchain(
        arch="aarch64", triple="aarch64-linux-gnu", emulator="qemu-aarch64-static",
        emulator_package="qemu-user-static", compiler="aarch64-linux-gnu-gcc",
        compiler_package="gcc-aarch64-linux-gnu", libc_package="libc6-dev-arm64-cross"),
    "x86_64": Toolchain(
        arch="x86_64", triple="x86_64-linux-gnu", emulator="qemu-x86_64-static",
        emulator_package="qemu-user-static", compiler="x86_64-linux-gnu-gcc",
        compiler_package="gcc-x86-64-linux-gnu", libc_package="libc6-dev-amd64-cross"),
}  # fmt: skip


class ToolMissing(UsageError):
    """An emulator or cross tool is not installed; the message names the Debian package."""


def host_arch() -> str:
    """This machine's architecture, spelt as canonical targets spell it."""
    machine = platform.machine().lower()
    return _MACHINE.get(machine, machine)


def needs_emulation(arch: str) -> bool:
    """Whether code for ``arch`` cannot run natively here."""
    return arch != host_arch()


def toolchain(arch: str) -> Toolchain:
    try:
        return TOOLCHAINS[arch]
    except KeyError:
        raise UsageError(
            f"no emulator known for {arch} code",
            hint=f"Emulated targets: {', '.join(sorted(TOOLCHAINS))}.",
        ) from None


def _missing(tool: str, package: str, why: str) -> ToolMissing:
    return ToolMissing(
        f"{tool} {why}: install the Debian package {package} "
        f"(apt-get install -y {package}) to verify this target under emulation"
    )


def find(tool: str, package: str) -> str:
    """The path of ``tool`` on PATH (or $GUARD_EMULATE_PATH first), else ToolMissing."""
    extra = os.environ.get("GUARD_EMULATE_PATH")
    path = shutil.which(tool, path=f"{extra}{os.pathsep}{os.environ.get('PATH', '')}"
                        if extra else None)  # fmt: skip
    if path is None:
        raise _missing(tool, package, "is not installed")
    return path


@functools.lru_cache(maxsize=8)
def _static_libc(compiler: str) -> Path | None:
    try:
        out = subprocess.run([compiler, "-print-file-name=libc.a"], capture_output=True,
                             text=True, timeout=30, check=False)  # fmt: skip
    except (OSError, subprocess.TimeoutExpired):
        return None
    path = Path(out.stdout.strip())
    return path if out.returncode == 0 and path.is_absolute() and path.is_file() else None


def require(arch: str, *, emulated: bool = True) -> tuple[Toolchain, str, str]:
    """(toolchain, emulator path, compiler path) for ``arch``; ToolMissing naming the package.

    ``emulated=False``: the program runs natively (the hardware-counter engine), so no
    emulator is needed and its path is ""."""
    tc = toolchain(arch)
    emulator = find(tc.emulator, tc.emulator_package) if emulated else ""
    compiler = find(tc.compiler, tc.compiler_package)
    if _static_libc(compiler) is None:
        raise _missing(f"the static C library for {tc.triple}", tc.libc_package, "is not installed")
    return tc, emulator, compiler


@functools.lru_cache(maxsize=8)
def compiler_identity(compiler: str) -> str:
    """The compiler's version line: part of the runner's cache key."""
    try:
        out = subprocess.run([compiler, "--version"], capture_output=True, text=True,
                             timeout=30, check=False)  # fmt: skip
    except (OSError, subprocess.TimeoutExpired):
        return compiler
    return (out.stdout.splitlines() or [compiler])[0]
