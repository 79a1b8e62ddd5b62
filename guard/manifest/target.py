"""Canonical target strings: two spellings of one target give one string.

The canonical string keys tuning caches and is a manifest pin, so it must not depend on
how the suite spelled the target. Accepted spellings:

- ``host`` / ``native``: this machine, resolved to its arch triple, CPU and features;
- TVM-style CLI strings: ``llvm -mtriple=aarch64-linux-gnu -mattr=+neon -mcpu=neoverse-n1``
  (``--key=value`` and ``-mcpu=native`` are accepted too);
- dict-like forms: a mapping, or its JSON text,
  ``{"kind": "llvm", "mtriple": "aarch64-linux-gnu", "mattr": ["+neon"]}``.

Canonicalisation: kind defaults to ``llvm``; mtriple defaults to the host's arch and is
normalised (``arm64`` -> ``aarch64``, the ``unknown``/``pc`` vendor dropped);
``native`` (as the whole target or as mcpu) becomes the host CPU name plus the host's
features; other attributes are checked against the llvm target's known ones and typed
(``-num-cores=4`` is the integer 4, ``-fast-math`` is true, false flags are dropped);
mattr entries get a ``+`` when unsigned, are de-duplicated and sorted; AArch64
implies ``+neon`` (Advanced SIMD is mandatory in ARMv8-A and on in LLVM's generic
AArch64 CPU, so spelling it names the same target); ``-mcpu=generic`` is LLVM's default
CPU and is dropped; attributes print sorted by key.

CPU and feature names are LLVM's own: the lists come from the LLVM that llvmlite carries
(its ``-mcpu=help`` table for the triple), so an unknown ``-mcpu`` or ``+feature`` is
refused by name with the known ones, instead of LLVM printing a warning and silently
compiling for its generic CPU. The compiler-driver spellings of AArch64 extensions that
LLVM names differently (``+fp16`` is LLVM's ``fullfp16``, ``+fp`` is ``fp-armv8``,
``+simd`` is ``neon``, ``+rdma`` is ``rdm``) are translated first, so
``-mattr=+fp16`` and ``-mattr=+fullfp16`` are one target.

Host facts come from /proc/cpuinfo under an injectable ``root``: ``flags`` on x86_64,
``Features`` on aarch64, translated to LLVM feature names and restricted to the
instruction-set features that change generated code (mitigation and virtualisation
flags change with the kernel, not the code, and would split caches for nothing). The
CPU name is LLVM's host CPU name (llvmlite) when reading the real root; otherwise, and
if llvmlite is unavailable, it is derived from cpuinfo: the AArch64 part number, or the
x86-64 micro-architecture level (x86-64-v2/v3/v4) the flags satisfy. Both are names
LLVM and TVM accept. (On AArch64 Linux, LLVM's own host feature detection reads the same
``Features`` line, so cpuinfo and LLVM agree.)
"""

from __future__ import annotations

import difflib
import functools
import json
import os
import platform
import re
import subprocess
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from guard.errors import UsageError

_EXAMPLE = (
    'write "host", "native", "llvm -mtriple=aarch64-linux-gnu -mattr=+neon" '
    'or {"kind": "llvm", "mtriple": "x86_64-linux-gnu", "mcpu": "x86-64-v3"}.'
)
KINDS = ("llvm",)
# The llvm target's attributes TVM 0.27 knows, with their types. An attribute outside this
# table would be refused by TVM's Target() long after the suite was accepted, and would
# split the tuning-cache key for nothing, so it is refused here, by name.
_ATTRS = {
    "mtriple": "str", "mcpu": "str", "mattr": "list", "mfloat-abi": "str", "mabi": "str",
    "num-cores": "int", "opt-level": "int", "vector-width": "int", "jit": "str",
    "fast-math": "bool", "fast-math-nnan": "bool", "fast-math-ninf": "bool",
    "fast-math-nsz": "bool", "fast-math-arcp": "bool", "fast-math-contract": "bool",
    "fast-math-reassoc": "bool",
}  # fmt: skip
ARCHES = ("x86_64", "aarch64")
_ARCH_ALIASES = {"x86_64": "x86_64", "amd64": "x86_64", "aarch64": "aarch64", "arm64": "aarch64"}
_KEY_RE = re.compile(r"^[a-z][a-z0-9_-]*$")

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


# gcc/clang -march extension spellings LLVM's AArch64 backend names differently.
_AARCH64_FEATURE_ALIASES = {"fp16": "fullfp16", "fp": "fp-armv8", "simd": "neon", "rdma": "rdm"}
_DEFAULT_CPU = "generic"  # LLVM's CPU when none is named: spelling it names the same target

# Prints LLVM's CPU and feature table for one triple on stderr. LLVM prints that table
# once per process, hence a child process per triple.
_HELP_SCRIPT = (
    "import sys, llvmlite.binding as llvm\n"
    "llvm.initialize_all_targets()\n"
    "llvm.Target.from_triple(sys.argv[1]).create_target_machine(cpu='help', features='')\n"
)


class TargetError(UsageError):
    """A target string or mapping cannot be parsed; the message names it."""


def _bad(raw: object, why: str) -> TargetError:
    return TargetError(f"target {raw!r}: {why};", hint=_EXAMPLE)


# -- host facts -----------------------------------------------------------------------------


def _cpuinfo_fields(text: str) -> dict[str, str]:
    """The first value of each key in /proc/cpuinfo (the first CPU describes them all)."""
    out: dict[str, str] = {}
    for line in text.splitlines():
        key, sep, value = line.partition(":")
        if sep:
            out.setdefault(key.strip(), value.strip())
    return out


@functools.lru_cache(maxsize=8)
def host_cpu(root: Path = Path("/")) -> dict[str, Any]:
    """{"arch", "model", "mcpu", "features"} of the machine whose /proc is under ``root``."""
    try:
        info = _cpuinfo_fields((root / "proc" / "cpuinfo").read_text())
    except OSError:
        info = {}
    if "flags" in info:
        arch = "x86_64"
    elif "Features" in info or "CPU implementer" in info:
        arch = "aarch64"
    else:
        arch = _ARCH_ALIASES.get(platform.machine().lower(), platform.machine().lower())
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
    return {
        "arch": arch,
        "model": model,
        "mcpu": mcpu or fallback_cpu,
        "features": [f"+{f}" for f in features],
    }


def _llvm_host_cpu_name() -> str | None:
    try:
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


def _known_list(names: frozenset[str], wanted: str) -> str:
    close = difflib.get_close_matches(wanted, sorted(names), n=3)
    hint = f"did you mean {', '.join(close)}? " if close else ""
    return f"{hint}known: {', '.join(sorted(names))}"


def _check_llvm_names(mtriple: str, mcpu: str | None, mattr: list[str], raw: object) -> None:
    """Refuse a CPU or feature the LLVM that compiles this target does not know."""
    known = llvm_known(mtriple)
    if known is None:
        return  # no llvmlite here: the backend that compiles will say so itself
    cpus, features = known
    if mcpu is not None and mcpu not in cpus:
        raise _bad(raw, f"unknown mcpu {mcpu!r} for {mtriple} ({_known_list(cpus, mcpu)})")
    for item in mattr:
        name = item[1:]
        if name not in features:
            raise _bad(
                raw, f"unknown mattr feature {name!r} for {mtriple} "
                f"({_known_list(features, name)})"
            )  # fmt: skip


# -- parsing --------------------------------------------------------------------------------


def _split_list(value: Any, raw: object, key: str) -> list[str]:
    if isinstance(value, str):
        items = [v.strip() for v in value.split(",")]
    elif isinstance(value, list | tuple):
        items = [str(v).strip() for v in value]
    else:
        raise _bad(raw, f"{key} must be a string or a list, got {type(value).__name__}")
    if any(not v for v in items):
        raise _bad(raw, f"{key} has an empty entry")
    return items


def _from_mapping(d: Mapping[str, Any], raw: object) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for k, v in d.items():
        key = str(k).lstrip("-")
        if not _KEY_RE.match(key):
            raise _bad(raw, f"bad attribute name {k!r}")
        if key in out:
            raise _bad(raw, f"attribute {key!r} is given twice")
        out[key] = v
    return out


def _from_cli(text: str, raw: object) -> dict[str, Any]:
    tokens = text.split()
    out: dict[str, Any] = {}
    if tokens and not tokens[0].startswith("-"):
        out["kind"] = tokens.pop(0)
    for tok in tokens:
        if not tok.startswith("-"):
            raise _bad(raw, f"expected -key=value, got {tok!r}")
        key, sep, value = tok.lstrip("-").partition("=")
        if not _KEY_RE.match(key):
            raise _bad(raw, f"bad attribute name {tok!r}")
        if key in out:
            raise _bad(raw, f"attribute {key!r} is given twice")
        if sep and not value:
            raise _bad(raw, f"attribute {key!r} has an empty value")
        out[key] = value if sep else "true"
    return out


def _coerce(key: str, value: Any, raw: object) -> Any:
    """One attribute's value as the type TVM's llvm target takes; unknown keys refused."""
    kind = _ATTRS.get(key)
    if kind is None:
        close = difflib.get_close_matches(key, list(_ATTRS), n=1)
        known = f"did you mean {close[0]!r}?" if close else f"known: {', '.join(sorted(_ATTRS))}"
        raise _bad(raw, f"unknown attribute {key!r} ({known})")
    if kind == "bool":
        if isinstance(value, bool):
            return value
        if isinstance(value, str) and value.lower() in ("1", "true", "0", "false"):
            return value.lower() in ("1", "true")
        raise _bad(raw, f"attribute {key!r} must be true or false, got {value!r}")
    if kind == "int":
        if isinstance(value, int) and not isinstance(value, bool) and value >= 0:
            return value
        if isinstance(value, str) and value.isdigit():
            return int(value)
        raise _bad(raw, f"attribute {key!r} must be a non-negative integer, got {value!r}")
    if not isinstance(value, str) or not value or any(c.isspace() for c in value):
        raise _bad(
            raw, f"attribute {key!r} must be a non-empty string without spaces, got {value!r}"
        )
    return value


def _normalize_triple(triple: str, raw: object) -> str:
    parts = triple.strip().lower().split("-")
    if len(parts) < 2 or not all(parts):
        raise _bad(raw, f"mtriple {triple!r} is not arch-vendor-os[-env]")
    arch = _ARCH_ALIASES.get(parts[0])
    if arch is None:
        raise _bad(raw, f"mtriple arch {parts[0]!r} is not one of {', '.join(ARCHES)}")
    rest = parts[1:]
    if len(rest) >= 2 and rest[0] in ("unknown", "pc"):
        rest = rest[1:]
    os_name = _triple_os(triple.strip().lower())
    if os_name != "linux":
        # guard builds ELF objects and runs them on Linux (natively or under qemu-user)
        raise _bad(raw, f"mtriple {triple!r}: OS {os_name!r} is not supported (known: linux, "
                   f"e.g. {arch}-linux-gnu)")  # fmt: skip
    return "-".join([arch, *rest])


def _triple_os(triple: str) -> str:
    """The OS of a triple as LLVM's triple parser reads it (``unknown`` if none)."""
    try:
        import llvmlite.binding as llvm

        return str(llvm.get_triple_parts(triple).OS)
    except (ImportError, AttributeError, RuntimeError):
        return "linux" if "linux" in triple.split("-") else "unknown"


def _normalize_mattr(items: list[str], raw: object, arch: str) -> list[str]:
    signed: dict[str, str] = {}
    aliases = _AARCH64_FEATURE_ALIASES if arch == "aarch64" else {}
    for item in items:
        sign, name = (item[0], item[1:]) if item[0] in "+-" else ("+", item)
        if not name or not re.match(r"^[a-z0-9][a-z0-9._-]*$", name):
            raise _bad(raw, f"bad mattr feature {item!r}")
        name = aliases.get(name, name)
        if signed.get(name, sign) != sign:
            raise _bad(raw, f"mattr both enables and disables {name!r}")
        signed[name] = sign
    return sorted(f"{s}{n}" for n, s in signed.items())


def parse_target(
    raw: str | Mapping[str, Any], *, root: Path = Path("/"), where: str | None = None
) -> dict[str, Any]:
    """Parse and canonicalise a target into a dict (kind, mtriple, mcpu, mattr list, ...).

    ``where`` (e.g. "smoke.yaml: models[0].target") prefixes error messages.
    """
    try:
        return _parse(raw, root)
    except TargetError as exc:
        if where is None:
            raise
        raise TargetError(str(exc), where=where) from None


def _parse(raw: str | Mapping[str, Any], root: Path) -> dict[str, Any]:
    if isinstance(raw, Mapping):
        attrs = _from_mapping(raw, raw)
    elif isinstance(raw, str):
        text = raw.strip()
        if not text:
            raise _bad(raw, "empty target")
        if text.startswith("{"):
            try:
                d = json.loads(text)
            except json.JSONDecodeError as exc:
                raise _bad(raw, f"not valid JSON ({exc.msg})") from None
            if not isinstance(d, dict):
                raise _bad(raw, "JSON form must be an object")
            attrs = _from_mapping(d, raw)
        elif text in ("host", "native"):
            attrs = {"kind": "llvm", "mcpu": "native"}
        else:
            attrs = _from_cli(text, raw)
    else:
        raise _bad(raw, f"must be a string or a mapping, got {type(raw).__name__}")

    kind = attrs.pop("kind", "llvm")
    if kind not in KINDS:
        raise _bad(raw, f"kind {kind!r} is not supported (one of {', '.join(KINDS)})")
    for key, value in list(attrs.items()):
        if key != "mattr":
            attrs[key] = _coerce(key, value, raw)
            if attrs[key] is False:  # a flag turned off is the flag absent (the default)
                del attrs[key]
    host = host_cpu(root)
    triple = attrs.pop("mtriple", None)
    mtriple = _normalize_triple(triple, raw) if triple else f"{host['arch']}-linux-gnu"
    arch = mtriple.split("-")[0]
    mattr = _split_list(attrs.pop("mattr"), raw, "mattr") if "mattr" in attrs else []
    if attrs.get("mcpu") == "native":
        if arch != host["arch"]:
            raise _bad(raw, f"mcpu=native on a {host['arch']} host cannot target {arch}")
        attrs["mcpu"] = host["mcpu"]
        mattr = host["features"] + mattr
    if arch == "aarch64":
        mattr = ["+neon", *mattr]
    if attrs.get("mcpu") == _DEFAULT_CPU:
        del attrs["mcpu"]
    canonical_mattr = _normalize_mattr(mattr, raw, arch)
    _check_llvm_names(mtriple, attrs.get("mcpu"), canonical_mattr, raw)
    out: dict[str, Any] = {"kind": kind, "mtriple": mtriple}
    if canonical_mattr:
        out["mattr"] = canonical_mattr
    for key in sorted(attrs):
        out[key] = attrs[key]
    return out


def _format(d: Mapping[str, Any]) -> str:
    parts = [str(d["kind"])]
    for key in sorted(k for k in d if k != "kind"):
        value = d[key]
        if value is True:
            parts.append(f"-{key}")
        elif isinstance(value, list):
            parts.append(f"-{key}={','.join(value)}")
        else:
            parts.append(f"-{key}={value}")
    return " ".join(parts)


def canonicalize(
    raw: str | Mapping[str, Any], *, root: Path = Path("/"), where: str | None = None
) -> str:
    """The canonical string of a target: ``llvm -mattr=+neon -mtriple=aarch64-linux-gnu``."""
    return _format(parse_target(raw, root=root, where=where))


def target_arch(canonical: str) -> str:
    """The architecture a canonical target compiles for: "x86_64" or "aarch64"."""
    m = re.search(r"(?:^|\s)-mtriple=([^\s]+)", canonical)
    if not m:
        raise _bad(canonical, "has no -mtriple; pass it through canonicalize() first")
    arch = _ARCH_ALIASES.get(m.group(1).split("-")[0].lower())
    if arch is None:
        raise _bad(canonical, f"mtriple {m.group(1)!r} is not for one of {', '.join(ARCHES)}")
    return arch


def to_tvm_dict(canonical: str) -> dict[str, Any]:
    """The dict form TVM 0.27 accepts (it refuses CLI strings): typed values, mattr a list."""
    return parse_target(canonical)
