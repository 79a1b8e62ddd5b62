"""The counting engine: QEMU user mode with guard's TCG plugin, instructions and bytes moved.

Wall time on a shared machine cannot tell two separate runs apart; counts can. The plugin
(``count_plugin.c`` beside this file) is built on first use with the system C compiler
and cached by the hash of its source, the compiler and the emulator. A program run under
``qemu-x86_64 -cpu max`` or ``qemu-aarch64`` with the plugin counts only between marker
instructions (``START_X86``/``STOP_X86``, ``hint #90``/``#91`` on AArch64) and writes one
line per marked region; ``run_counted`` starts it and reads those lines back.

Why this engine (measured here, FACTS.md): Valgrind's callgrind counts as steadily but
runs FMA-heavy code ~1000x slower (FMA is a helper call) and cannot run AArch64 code on an
x86 host; qemu with a small plugin runs ~500x slower, runs both architectures, and counts
a static AArch64 program identically run to run. A host PMU (``perf_event_open``) counts
instructions (not bytes) at native speed where one is exposed: guard.counting.pmu is that
second engine, and guard.counting.count chooses between the two.

The dynamic ``qemu-x86_64``/``qemu-aarch64`` (Debian ``qemu-user``) load plugins; the
static build (``qemu-user-static``) cannot.
"""

from __future__ import annotations

import functools
import hashlib
import os
import re
import shutil
import subprocess
import tempfile
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from guard.emulate.runner import cache_root
from guard.emulate.tools import ToolMissing, compiler_identity

PLUGIN_SOURCE = Path(__file__).with_name("count_plugin.c")
ENGINE = "qemu-tcg-plugin"
# The emulators that load plugins, per architecture, and the Debian package of each.
EMULATORS = {"x86_64": "qemu-x86_64", "aarch64": "qemu-aarch64"}
EMULATOR_PACKAGE = "qemu-user"
COMPILER, COMPILER_PACKAGE = "cc", "gcc"
# Marker instructions: no-ops to the CPU that compilers never emit (count_plugin.c).
START_X86 = bytes.fromhex("0f1f8031445247")
STOP_X86 = bytes.fromhex("0f1f8030445247")
START_A64 = (0xD5032B5F).to_bytes(4, "little")
STOP_A64 = (0xD5032B7F).to_bytes(4, "little")

_VERSION_RE = re.compile(r"version (\d+)\.(\d+)(?:\.(\d+))?")


class CountingFailed(Exception):
    """A counted run crashed, ran past its budget or marked nothing; the message says which."""


@dataclass(frozen=True)
class Region:
    """One marked region's counts (one inference, when the program marks each)."""

    instructions: int
    # None where the engine counts no memory traffic (the hardware counter, guard.counting.pmu).
    loads: int | None
    stores: int | None
    bytes_loaded: int | None
    bytes_stored: int | None
    # Instructions per address range (run_counted's ``ranges``, by index) run in the region.
    per_range: dict[int, int] = field(default_factory=dict)


@dataclass(frozen=True)
class Engine:
    """What counts: the emulator, its version and the built plugin (with its hash)."""

    arch: str
    emulator: str
    emulator_version: str
    plugin: Path
    plugin_sha256: str

    def fingerprint(self) -> dict[str, str]:
        return {
            "engine": ENGINE,
            "emulator": f"{Path(self.emulator).name} {self.emulator_version}",
            "plugin_sha256": self.plugin_sha256,
        }


def _missing(what: str, package: str) -> ToolMissing:
    return ToolMissing(
        f"counted runs need {what}: install the Debian packages {EMULATOR_PACKAGE} and "
        f"{COMPILER_PACKAGE} (apt-get install -y {EMULATOR_PACKAGE} {COMPILER_PACKAGE}); "
        f"{package} provides it"
    )


def _which(tool: str) -> str | None:
    extra = os.environ.get("GUARD_EMULATE_PATH")
    path = f"{extra}{os.pathsep}{os.environ.get('PATH', '')}" if extra else None
    return shutil.which(tool, path=path)


@functools.lru_cache(maxsize=8)
def emulator_version(emulator: str) -> str:
    """``MAJOR.MINOR.PATCH`` of a qemu binary (its ``--version`` line)."""
    try:
        out = subprocess.run([emulator, "--version"], capture_output=True, text=True,
                             timeout=30, check=False)  # fmt: skip
    except (OSError, subprocess.TimeoutExpired):
        return "unknown"
    m = _VERSION_RE.search(out.stdout)
    return ".".join(g for g in m.groups() if g is not None) if m else "unknown"


def _plugin_defines(version: str) -> list[str]:
    """The plugin API the emulator speaks: QEMU 9 copies instruction bytes out."""
    try:
        major = int(version.split(".")[0])
    except ValueError:
        return []
    return ["-DGUARD_QEMU_INSN_COPY", "-DGUARD_QEMU_PLUGIN_VERSION=2"] if major >= 9 else []


def engine(arch: str, *, cache_dir: Path | None = None) -> Engine:
    """The counting engine for ``arch`` code: emulator found, plugin built (once, cached).

    Raises ToolMissing (one line naming the Debian packages) when the emulator or the C
    compiler is not installed.
    """
    tool = EMULATORS.get(arch)
    if tool is None:
        raise ToolMissing(f"no counting emulator for {arch} code (counted: x86_64, aarch64)")
    emulator = _which(tool)
    if emulator is None:
        raise _missing(tool, EMULATOR_PACKAGE)
    compiler = _which(COMPILER) or _which("gcc")
    if compiler is None:
        raise _missing("a C compiler (cc)", COMPILER_PACKAGE)
    version = emulator_version(emulator)
    defines = _plugin_defines(version)
    key = hashlib.sha256()
    for part in (PLUGIN_SOURCE.read_bytes(), compiler_identity(compiler).encode(),
                 " ".join(defines).encode()):  # fmt: skip
        key.update(part + b"\0")
    digest = key.hexdigest()
    out_dir = (cache_dir or cache_root()) / "count-plugin" / digest[:32]
    plugin = out_dir / "count_plugin.so"
    if not plugin.is_file():
        out_dir.mkdir(parents=True, exist_ok=True)
        fd, tmp_name = tempfile.mkstemp(prefix=".plugin.", suffix=".so", dir=out_dir)
        os.close(fd)
        cmd = [compiler, "-shared", "-fPIC", "-O2", "-fvisibility=hidden", *defines,
               "-o", tmp_name, str(PLUGIN_SOURCE)]  # fmt: skip
        try:
            proc = subprocess.run(cmd, capture_output=True, text=True, timeout=120, check=False)
            if proc.returncode != 0:
                raise CountingFailed(
                    "cannot build the counting plugin: " + " ".join(proc.stderr.split())[-300:]
                )
            os.replace(tmp_name, plugin)
        finally:
            Path(tmp_name).unlink(missing_ok=True)
    return Engine(arch, emulator, version, plugin, digest)


def read_regions(path: Path) -> list[Region]:
    """The plugin's output: one Region per ``region ...`` line, with the ``range INDEX
    INSNS`` lines that follow it."""
    regions: list[Region] = []
    for line in path.read_text().splitlines():
        parts = line.split()
        if len(parts) == 6 and parts[0] == "region":
            insns, loads, stores, loaded, stored = (int(p) for p in parts[1:])
            regions.append(Region(insns, loads, stores, loaded, stored))
        elif len(parts) == 3 and parts[0] == "range" and regions:
            regions[-1].per_range[int(parts[1])] = int(parts[2])
    return regions


def no_aslr() -> list[str]:
    """``setarch -R`` where it exists: one address layout, so pointer-keyed hashing and
    alignment-dependent paths (memcpy heads and tails) take the same turns in every process."""
    setarch = shutil.which("setarch")
    return [setarch, "-R"] if setarch else []


def run_program(
    cmd: Sequence[str],
    *,
    timeout_s: float,
    env: Mapping[str, str] | None = None,
    cwd: Path | None = None,
) -> None:
    """Run one counted process to its end; a crash, a non-zero exit or a run past
    ``timeout_s`` raises CountingFailed with the reason (the engines share it)."""
    try:
        proc = subprocess.run(list(cmd), capture_output=True, timeout=timeout_s, check=False,
                              env=dict(env) if env is not None else None, cwd=cwd)  # fmt: skip
    except subprocess.TimeoutExpired:
        raise CountingFailed(f"over its budget of {timeout_s:g} s") from None
    if proc.returncode != 0:
        tail = " ".join(proc.stderr.decode(errors="replace").split())[-300:]
        code = proc.returncode
        how = f"killed by signal {-code}" if code < 0 else f"exit status {code}"
        raise CountingFailed(f"the counted process failed ({how}): {tail}")


def run_counted(
    eng: Engine,
    argv: Sequence[str],
    *,
    timeout_s: float,
    env: Mapping[str, str] | None = None,
    cwd: Path | None = None,
    ranges: Sequence[tuple[int, int]] = (),
) -> list[Region]:
    """Run ``argv`` (a program for ``eng.arch``) under the emulator with the plugin.

    ``ranges``: sorted, disjoint guest address ranges [start, end) whose instructions are
    also counted apart (Region.per_range, by index): the generated kernels' symbols.

    Returns the marked regions in order. A crash, a non-zero exit or a run past
    ``timeout_s`` raises CountingFailed with the reason.
    """
    with tempfile.TemporaryDirectory(prefix="guard-count-") as tmp_name:
        out = Path(tmp_name) / "regions.txt"
        opts = f"{eng.plugin},out={out}"
        if ranges:
            (Path(tmp_name) / "ranges.txt").write_text("".join(f"{a:x} {b:x}\n" for a, b in ranges))
            opts += f",ranges={Path(tmp_name) / 'ranges.txt'}"
        cmd = [*no_aslr(), eng.emulator, "-cpu", "max", "-plugin", opts, *argv]
        run_program(cmd, timeout_s=timeout_s, env=env, cwd=cwd)
        regions = read_regions(out) if out.is_file() else []
    if not regions:
        raise CountingFailed("the counted process marked no region")
    return regions
