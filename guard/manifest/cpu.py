"""This machine's CPU, and the CPU and feature names LLVM knows for a triple.

Host facts come from /proc/cpuinfo under an injectable ``root``: ``flags`` on x86_64,
``Features`` on aarch64, translated to LLVM feature names and restricted to the
instruction-set features that change generated code (mitigation and virtualisation
flags change with the kernel, not the code, and would split caches for nothing). The
CPU name is LLVM's host CPU name (llvmlite) when reading the real root; otherwise, and
if llvmlite is unavailable, it is derived from cpuinfo: the AArch64 part number, or the
x86-64 micro-architecture level (x86-64-v2/v3/v4) the flags satisfy. Both are names
LLVM and TVM accept. (On AArch64 Linux, LLVM's own host feature detection reads the same
``Features`` line, so cpuinfo and LLVM agree.)

LLVM's CPU and feature lists for a triple come from the LLVM that llvmlite carries (its
``-mcpu=help`` table, printed by a child process: LLVM prints it once per process), so
guard.manifest.target_string can refuse an unknown ``-mcpu`` or ``+feature`` by name.
"""

from __future__ import annotations

import difflib
import functools
import os
import platform
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

ARCH_ALIASES = {"x86_64": "x86_64", "amd64": "x86_64", "aarch64": "aarch64", "arm64": "aarch64"}

# /proc/cpuinfo flag -> LLVM feature, for the flags that change generated code.
_X86_FEATURES = {
    "sse": "sse", "sse2": "sse2", "pni": "sse3", "ssse3": "ssse3", "sse4_1": "sse4.1",
    "sse4_2": "sse4.2", "popcnt": "popcnt", "avx": "avx", "avx2": "avx2", "fma": "fma",
    "f16c": "f16c", "bmi1": "bmi", "bmi2": "bmi2", "abm": "lzcnt", "movbe": "movbe",
    "aes": "aes", "pclmulqdq": "pclmul", "sha_ni": "sha", "gfni": "gfni", "vaes": "vaes",
    "vpclmulqdq": "vpclmulqdq", "avx512f": "avx512f", "avx512cd": "avx512cd",
    "avx512bw": "avx512bw", "avx512dq": "avx512dq", "avx512vl": "avx512vl",
    "avx512ifma": "avx512ifma", "avx512vbmi": "avx512vbmi", "avx512_vbmi2": "avx512vbmi2",
    "avx512_vnni": "avx512vnni", "avx512_bitalg": "avx512bitalg",
    "avx512_vpopcntdq": "avx512vpopcntdq", "avx512_bf16": "avx512bf16",
    "avx512_fp16": "avx512fp16", "avx_vnni": "avxvnni", "amx_tile": "amx-tile",
    "amx_int8": "amx-int8", "amx_bf16": "amx-bf16",
}  # fmt: skip
_AARCH64_FEATURES = {
    "fp": "fp-armv8", "asimd": "neon", "aes": "aes", "sha2": "sha2", "sha3": "sha3",
    "crc32": "crc", "atomics": "lse", "asimdrdm": "rdm", "asimddp": "dotprod",
    "asimdhp": "fullfp16", "asimdfhm": "fp16fml", "sve": "sve", "sve2": "sve2",
    "i8mm": "i8mm", "bf16": "bf16", "sme": "sme", "lrcpc": "rcpc",
}  # fmt: skip
# /proc/cpuinfo "CPU implementer" 0x41 (Arm) "CPU part" -> LLVM CPU name.
_ARM_PARTS = {
    "0xd03": "cortex-a53", "0xd05": "cortex-a55", "0xd07": "cortex-a57", "0xd08": "cortex-a72",
    "0xd0a": "cortex-a75", "0xd0b": "cortex-a76", "0xd0c": "neoverse-n1", "0xd0d": "cortex-a77",
    "0xd40": "neoverse-v1", "0xd41": "cortex-a78", "0xd49": "neoverse-n2",
    "0xd4f": "neoverse-v2", "0xd8e": "neoverse-n3", "0xd84": "neoverse-v3",
}  # fmt: skip
# x86-64 micro-architecture levels (psABI), as cpuinfo flags.
_X86_LEVELS = (
    ("x86-64-v4", {"avx512f", "avx512bw", "avx512cd", "avx512dq", "avx512vl"}),
    ("x86-64-v3", {"avx", "avx2", "bmi1", "bmi2", "f16c", "fma", "abm", "movbe"}),
    ("x86-64-v2", {"cx16", "lahf_lm", "popcnt", "pni", "sse4_1", "sse4_2", "ssse3"}),
)


# Prints LLVM's CPU and feature table for one triple on stderr. LLVM prints that table
# once per process, hence a child process per triple.
_HELP_SCRIPT = (
    "import sys, llvmlite.binding as llvm\n"
    "llvm.initialize_all_targets()\n"
    "llvm.Target.from_triple(sys.argv[1]).create_target_machine(cpu='help', features='')\n"
)


def _cpuinfo_fields(text: str) -> dict[str, str]:
    """The first value of each key in /proc/cpuinfo (the first CPU describes them all)."""
    out: dict[str, str] = {}
    for line in text.splitlines():
        key, sep, value = line.partition(":")
        if sep:
            out.setdefault(key.strip(), value.strip())
    return out


@dataclass(frozen=True)
class HostCpu:
    """A machine's CPU as guard reads it: what the host target resolves to and the manifest
    records."""

    arch: str  # "x86_64" or "aarch64"
    model: str | None  # /proc/cpuinfo's model name (None where it gives none)
    mcpu: str  # LLVM's name for it (its x86-64 level, or "generic", off this machine)
    features: tuple[str, ...]  # LLVM feature names that change code, sorted: ("+avx2", ...)


@functools.lru_cache(maxsize=8)
def host_cpu(root: Path = Path("/")) -> HostCpu:
    """The CPU of the machine whose /proc is under ``root``."""
    try:
        info = _cpuinfo_fields((root / "proc" / "cpuinfo").read_text())
    except OSError:
        info = {}
    if "flags" in info:
        arch = "x86_64"
    elif "Features" in info or "CPU implementer" in info:
        arch = "aarch64"
    else:
        arch = ARCH_ALIASES.get(platform.machine().lower(), platform.machine().lower())
    if arch == "x86_64":
        flags = set(info.get("flags", "").split())
        features = sorted({_X86_FEATURES[f] for f in flags if f in _X86_FEATURES})
        level = next((name for name, need in _X86_LEVELS if need <= flags), "x86-64")
        fallback_cpu = level
        model = info.get("model name")
    else:
        flags = set(info.get("Features", "").split())
        features = sorted({_AARCH64_FEATURES[f] for f in flags if f in _AARCH64_FEATURES})
        part = info.get("CPU part", "").lower()
        fallback_cpu = (
            _ARM_PARTS.get(part, "generic") if info.get("CPU implementer") == "0x41" else "generic"
        )
        model = info.get("model name") or (
            f"implementer {info['CPU implementer']} part {part}"
            if "CPU implementer" in info
            else None
        )
    mcpu = _llvm_host_cpu_name() if root == Path("/") else None
    return HostCpu(arch, model, mcpu or fallback_cpu, tuple(f"+{f}" for f in features))


@functools.lru_cache(maxsize=8)
def host_caches(root: Path = Path("/")) -> dict[str, int]:
    """{"l1d_bytes", "l2_bytes", "l3_bytes"} of CPU 0 (sysfs under ``root``); a level the
    kernel does not list is left out (a container without sysfs gives {})."""
    out: dict[str, int] = {}
    base = root / "sys" / "devices" / "system" / "cpu" / "cpu0" / "cache"
    for d in sorted(base.glob("index*")):
        try:
            level = (d / "level").read_text().strip()
            kind = (d / "type").read_text().strip()
            size = (d / "size").read_text().strip()
        except OSError:
            continue
        mult = {"K": 1024, "M": 1024 * 1024}.get(size[-1:], 1)
        num = size[:-1] if size[-1:] in ("K", "M") else size
        if not num.isdigit() or kind == "Instruction":
            continue
        key = "l1d_bytes" if level == "1" else f"l{level}_bytes"
        out[key] = int(num) * mult
    return out


def _llvm_host_cpu_name() -> str | None:
    try:  # llvmlite is optional here: without it the CPU name is derived from cpuinfo
        import llvmlite.binding as llvm
    except ImportError:
        return None
    name = str(llvm.get_host_cpu_name())
    return None if name in ("", "generic") else name


@functools.lru_cache(maxsize=4)
def llvm_known(triple: str) -> tuple[frozenset[str], frozenset[str]] | None:
    """(CPU names, feature names) LLVM knows for ``triple``; None without a usable llvmlite."""
    try:
        proc = subprocess.run(
            [sys.executable, "-c", _HELP_SCRIPT, triple],
            capture_output=True, text=True, timeout=60, check=False,
            env={**os.environ, "PYTHONWARNINGS": "ignore"},
        )  # fmt: skip
    except (OSError, subprocess.TimeoutExpired):
        return None
    cpus: set[str] = set()
    features: set[str] = set()
    table: set[str] | None = None
    for line in proc.stderr.splitlines():
        if line.startswith("Available CPUs"):
            table = cpus
        elif line.startswith("Available features"):
            table = features
        elif line.startswith("  ") and table is not None and " - " in line:
            table.add(line.split()[0])
        elif line and not line.startswith(" "):
            table = None  # the usage lines after the tables
    if not cpus or not features:
        return None
    return frozenset(cpus), frozenset(features)


def known_list(names: frozenset[str], wanted: str) -> str:
    close = difflib.get_close_matches(wanted, sorted(names), n=3)
    hint = f"did you mean {', '.join(close)}? " if close else ""
    return f"{hint}known: {', '.join(sorted(names))}"
