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

What ``host`` resolves to (this machine's arch, CPU and features, from /proc/cpuinfo and
LLVM) and LLVM's name lists live in guard.manifest.cpu.
"""

from __future__ import annotations

import difflib
import json
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from guard.core.errors import UsageError
from guard.core.json_types import Json, JsonObject
from guard.manifest.cpu import ARCH_ALIASES, host_cpu, known_list, llvm_known

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
_KEY_RE = re.compile(r"^[a-z][a-z0-9_-]*$")

# gcc/clang -march extension spellings LLVM's AArch64 backend names differently.
_AARCH64_FEATURE_ALIASES = {"fp16": "fullfp16", "fp": "fp-armv8", "simd": "neon", "rdma": "rdm"}
_DEFAULT_CPU = "generic"  # LLVM's CPU when none is named: spelling it names the same target


class TargetError(UsageError):
    """A target string or mapping cannot be parsed; the message names it."""


@dataclass(frozen=True)
class ParsedTarget:
    """A target, canonicalised: its kind and triple, its features (``mattr``: signed,
    de-duplicated, sorted) and the other llvm attributes by name, typed as ``_ATTRS`` says
    (a flag is True; one turned off is absent)."""

    kind: str
    mtriple: str
    mattr: tuple[str, ...] = ()
    attrs: Mapping[str, str | int | bool] = field(default_factory=dict)

    @property
    def mcpu(self) -> str | None:
        """The CPU named (``generic``, LLVM's default, is never named)."""
        v = self.attrs.get("mcpu")
        return None if v is None else str(v)

    def to_dict(self) -> dict[str, str | int | bool | list[str]]:
        """The dict form (TVM 0.27's): kind, mtriple, mattr when there are features, then
        the attributes sorted by name."""
        out: dict[str, str | int | bool | list[str]] = {"kind": self.kind, "mtriple": self.mtriple}
        if self.mattr:
            out["mattr"] = list(self.mattr)
        for key in sorted(self.attrs):
            out[key] = self.attrs[key]
        return out


def _bad(raw: object, why: str) -> TargetError:
    return TargetError(f"target {raw!r}: {why};", hint=_EXAMPLE)


def _check_llvm_names(mtriple: str, mcpu: str | None, mattr: list[str], raw: object) -> None:
    """Refuse a CPU or feature the LLVM that compiles this target does not know."""
    known = llvm_known(mtriple)
    if known is None:
        return  # no llvmlite here: the backend that compiles will say so itself
    cpus, features = known
    if mcpu is not None and mcpu not in cpus:
        raise _bad(raw, f"unknown mcpu {mcpu!r} for {mtriple} ({known_list(cpus, mcpu)})")
    for item in mattr:
        name = item[1:]
        if name not in features:
            raise _bad(
                raw, f"unknown mattr feature {name!r} for {mtriple} "
                f"({known_list(features, name)})"
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


def _from_mapping(d: Mapping[str, Json], raw: object) -> JsonObject:
    """A target's attributes as the user gave them, before _coerce checks each."""
    out: JsonObject = {}
    for k, v in d.items():
        key = str(k).lstrip("-")
        if not _KEY_RE.match(key):
            raise _bad(raw, f"bad attribute name {k!r}")
        if key in out:
            raise _bad(raw, f"attribute {key!r} is given twice")
        out[key] = v
    return out


def _from_cli(text: str, raw: object) -> dict[str, str]:
    tokens = text.split()
    out: dict[str, str] = {}
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
    arch = ARCH_ALIASES.get(parts[0])
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
    try:  # llvmlite is optional here: without it, a plain reading of the triple
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
    raw: str | Mapping[str, Json], *, root: Path = Path("/"), where: str | None = None
) -> ParsedTarget:
    """Parse and canonicalise a target.

    ``where`` (e.g. "smoke.yaml: models[0].target") prefixes error messages.
    """
    try:
        return _parse(raw, root)
    except TargetError as exc:
        if where is None:
            raise
        raise TargetError(str(exc), where=where) from None


def _parse(raw: str | Mapping[str, Json], root: Path) -> ParsedTarget:
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
    mtriple = _normalize_triple(triple, raw) if triple else f"{host.arch}-linux-gnu"
    arch = mtriple.split("-")[0]
    mattr = _split_list(attrs.pop("mattr"), raw, "mattr") if "mattr" in attrs else []
    if attrs.get("mcpu") == "native":
        if arch != host.arch:
            raise _bad(raw, f"mcpu=native on a {host.arch} host cannot target {arch}")
        attrs["mcpu"] = host.mcpu
        mattr = [*host.features, *mattr]
    if arch == "aarch64":
        mattr = ["+neon", *mattr]
    if attrs.get("mcpu") == _DEFAULT_CPU:
        del attrs["mcpu"]
    canonical_mattr = _normalize_mattr(mattr, raw, arch)
    _check_llvm_names(mtriple, attrs.get("mcpu"), canonical_mattr, raw)
    return ParsedTarget(kind, mtriple, tuple(canonical_mattr), {k: attrs[k] for k in sorted(attrs)})


def _format(t: ParsedTarget) -> str:
    d = t.to_dict()
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
    raw: str | Mapping[str, Json], *, root: Path = Path("/"), where: str | None = None
) -> str:
    """The canonical string of a target: ``llvm -mattr=+neon -mtriple=aarch64-linux-gnu``."""
    return _format(parse_target(raw, root=root, where=where))


def target_fields(target: str) -> dict[str, str | int | bool | set[str]]:
    """A recorded target's attributes for comparing two of them: ``parse_target``'s dict
    form, with mattr as a set (``{"kind": "llvm", "mtriple": ..., "mattr": {"+neon"}, ...}``).

    A TargetError says why the string cannot be read here (e.g. a CPU this LLVM does not
    know); callers that only describe a difference turn it into words, not a failure.
    """
    parsed = parse_target(target)
    fields: dict[str, str | int | bool | set[str]] = {
        "kind": parsed.kind,
        "mtriple": parsed.mtriple,
    }
    if parsed.mattr:
        fields["mattr"] = set(parsed.mattr)
    fields.update({k: parsed.attrs[k] for k in sorted(parsed.attrs)})
    fields.setdefault("mattr", set())  # the order parse_target's dict had
    return fields


def target_changes(a: str, b: str) -> list[tuple[str, Any, Any]]:
    """How target ``b`` differs from ``a``, attribute by attribute in key order: ``(key,
    a's value, b's value)``, except mattr: ``("mattr", features b adds, features b
    drops)``, each sorted. Both are read with ``target_fields`` (a TargetError if one
    cannot be)."""
    fa, fb = target_fields(a), target_fields(b)
    out: list[tuple[str, Any, Any]] = []
    for k in sorted({*fa, *fb}):
        va, vb = fa.get(k), fb.get(k)
        if va == vb:
            continue
        if k == "mattr" and isinstance(va, set) and isinstance(vb, set):  # always, both
            out.append((k, sorted(vb - va), sorted(va - vb)))
        else:
            out.append((k, va, vb))
    return out


def target_arch(canonical: str) -> str:
    """The architecture a canonical target compiles for: "x86_64" or "aarch64"."""
    m = re.search(r"(?:^|\s)-mtriple=([^\s]+)", canonical)
    if not m:
        raise _bad(canonical, "has no -mtriple; pass it through canonicalize() first")
    arch = ARCH_ALIASES.get(m.group(1).split("-")[0].lower())
    if arch is None:
        raise _bad(canonical, f"mtriple {m.group(1)!r} is not for one of {', '.join(ARCHES)}")
    return arch


def to_tvm_dict(canonical: str) -> dict[str, str | int | bool | list[str]]:
    """The dict form TVM 0.27 accepts (it refuses CLI strings): typed values, mattr a list."""
    return parse_target(canonical).to_dict()
