"""The code generator's target: triple, CPU and features from the canonical target string.

Never the host's by accident: ``host`` was resolved to this machine's triple, CPU and
features by guard.manifest.target_string before it got here, and that canonical string is what
the TargetMachine is made from (and what the artefact pins). Unknown CPU or feature
names were refused there (exit 2, naming the string and LLVM's known ones).

The instruction-set class (``avx512``, ``avx2``, ``sse``, ``neon``) is LLVM's answer, not a
reading of the feature list: a CPU name implies features the string does not spell out
(``-mcpu=x86-64-v3`` is AVX2, ``-mcpu=skylake-avx512`` AVX-512, ``-mattr=-avx512f`` takes
it away), so :func:`isa_class` lowers one 16-lane add for the target and reads which
registers LLVM used (zmm: 16 float lanes, ymm: 8, else 4). The class picks the row of the
per-target table (guard.compiler.ir.isa_table) every heuristic reads; for the host the row
carries the host's cache sizes (the manifest's host facts).

The integer dot-product capability is LLVM's answer the same way: :func:`int_dot_class`
lowers a reduction of u8 x s8 products and reads the instruction LLVM picked (vpdpbusd on
zmm or, VEX-encoded, on ymm; vpmaddwd; usdot; sdot for u8 x u8), so ``-mcpu=znver4``,
``-mattr=+avxvnni`` and ``-mattr=-avx512vnni`` all answer for themselves. It is pinned
in the manifest (``int_dot``) and :func:`runnable_here` checks the host has the LLVM
features the capability needs (guard.compiler.ir.isa_table.INT_DOT_FEATURES): an
artefact built for VNNI refuses, with the reason, to run where VNNI is missing.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass
from typing import TYPE_CHECKING

from guard.compiler.ir.isa_table import INT_DOT_FEATURES, TargetTable, table_for
from guard.core.errors import ModelError
from guard.manifest.cpu import host_caches
from guard.manifest.target_string import parse_target

if TYPE_CHECKING:
    import llvmlite.binding

OPT_LEVEL = 3


@functools.cache
def _init_llvm() -> None:
    import llvmlite.binding as llvm

    llvm.initialize_all_targets()
    llvm.initialize_all_asmprinters()


@dataclass(frozen=True)
class CodegenTarget:
    triple: str
    cpu: str
    features: tuple[str, ...]  # "+avx2", ... sorted

    @property
    def arch(self) -> str:
        return self.triple.split("-")[0]

    @property
    def isa(self) -> str:
        return isa_class(self.triple, self.cpu, self.features)

    @property
    def int_dot(self) -> str:
        return int_dot_class(self.triple, self.cpu, self.features)

    @property
    def byte_lookup(self) -> str:
        return byte_lookup_class(self.triple, self.cpu, self.features)

    @property
    def vector_width(self) -> int:
        return table_for(self.isa).vector_width

    @property
    def table(self) -> TargetTable:
        """The per-target table; the host's cache sizes when this is the host's CPU."""
        host = host_target()
        caches = host_caches() if (self.triple, self.cpu) == (host.triple, host.cpu) else {}
        return table_for(
            self.isa, caches.get("l1d_bytes"), caches.get("l2_bytes"), int_dot=self.int_dot
        )

    @property
    def feature_string(self) -> str:
        return ",".join(self.features)

    def target_machine(self) -> llvmlite.binding.TargetMachine:
        """A fresh TargetMachine (an execution engine takes ownership of the one it gets)."""
        import llvmlite.binding as llvm

        _init_llvm()
        target = llvm.Target.from_triple(self.triple)
        reloc, codemodel = self.code_model
        return target.create_target_machine(
            cpu=self.cpu,
            features=self.feature_string,
            opt=OPT_LEVEL,
            reloc=reloc,
            codemodel=codemodel,
        )

    @property
    def code_model(self) -> tuple[str, str]:
        """(relocation model, code model) of the object. x86_64 objects use the large code
        model with absolute (R_X86_64_64) relocations: RuntimeDyld maps an object's code
        and constant sections separately, and in a process whose address space has grown
        (a test session, a benchmark of several models) they can land more than 2 GiB
        apart, where the small model's 32-bit PC-relative references abort LLVM
        (``isInt<32>(RealOffset)``). The cost is a 64-bit address load per constant-pool
        base, hoisted out of loops (QDQ ShuffleNet: 8.06 against 8.12 ms, within noise).
        AArch64 objects are linked by the system linker for emulation and keep the
        default model."""
        return ("static", "large") if self.triple.startswith("x86_64") else ("pic", "default")

    def to_dict(self) -> dict[str, object]:
        return {
            "triple": self.triple,
            "cpu": self.cpu,
            "features": list(self.features),
            "vector_width": self.vector_width,
            "int_dot": self.int_dot,
            "opt_level": OPT_LEVEL,
            "code_model": "/".join(self.code_model),
            "table": self.table.to_dict(),
        }


def codegen_target(canonical: str) -> CodegenTarget:
    """The target of a canonical (or raw: it is canonicalised) target string."""
    d = parse_target(canonical)
    triple = d.mtriple
    if not triple.startswith(("x86_64", "aarch64")):
        raise ModelError(
            f"target {canonical!r}: the bundled code generator emits x86_64 and aarch64 only"
        )
    return CodegenTarget(triple, d.mcpu or "generic", tuple(sorted(d.mattr)))


@functools.cache
def host_target() -> CodegenTarget:
    return codegen_target("host")


_PROBE = """define void @probe(ptr %p) {
  %v = load <16 x float>, ptr %p
  %w = fadd <16 x float> %v, %v
  store <16 x float> %w, ptr %p
  ret void
}
"""


@functools.cache
def isa_class(triple: str, cpu: str, features: tuple[str, ...]) -> str:
    """``avx512``, ``avx2``, ``sse`` or ``neon``: which registers LLVM lowers a 16-lane float
    add to for this triple, CPU and features (a few ms, once per target and process)."""
    if not triple.startswith("x86_64"):
        return "neon"
    import llvmlite.binding as llvm

    _init_llvm()
    tm = llvm.Target.from_triple(triple).create_target_machine(
        cpu=cpu, features=",".join(features), opt=0
    )
    mod = llvm.parse_assembly(_PROBE)
    mod.triple = triple
    asm = tm.emit_assembly(mod)
    return "avx512" if "zmm" in asm else "avx2" if "ymm" in asm else "sse"


_DOT_PROBE = """define i32 @probe(ptr %pa, ptr %pb) {
  %a = load <64 x i8>, ptr %pa
  %b = load <64 x i8>, ptr %pb
  %za = zext <64 x i8> %a to <64 x i32>
  %sb = SEXT <64 x i8> %b to <64 x i32>
  %m = mul <64 x i32> %za, %sb
  %r = call i32 @llvm.vector.reduce.add.v64i32(<64 x i32> %m)
  ret i32 %r
}
declare i32 @llvm.vector.reduce.add.v64i32(<64 x i32>)
"""


def _lowered(triple: str, cpu: str, features: tuple[str, ...], src: str) -> str:
    import llvmlite.binding as llvm

    _init_llvm()
    tm = llvm.Target.from_triple(triple).create_target_machine(
        cpu=cpu, features=",".join(features), opt=2
    )
    mod = llvm.parse_assembly(src)
    mod.triple = triple
    return str(tm.emit_assembly(mod))


@functools.cache
def int_dot_class(triple: str, cpu: str, features: tuple[str, ...]) -> str:
    """The integer dot-product capability (guard.compiler.ir.isa_table.INT_DOTS) that LLVM
    shows for this triple, CPU and features: which instruction it lowers a sum of u8 x s8
    (and, on AArch64, u8 x u8) products to (a few ms, once per target and process)."""
    if triple.startswith("aarch64"):
        if "usdot" in _lowered(triple, cpu, features, _DOT_PROBE.replace("SEXT", "sext")):
            return "neon_i8mm"
        if "udot" in _lowered(triple, cpu, features, _DOT_PROBE.replace("SEXT", "zext")):
            return "neon_dotprod"
        return "neon"
    asm = _lowered(triple, cpu, features, _DOT_PROBE.replace("SEXT", "sext"))
    if "vpdpbusd" in asm:
        return "avx512_vnni" if "zmm" in asm else "avx_vnni"
    if "vpmaddwd" in asm:
        return "avx512bw" if "zmm" in asm else "avx2" if "ymm" in asm else "none"
    return "none"


_PERMUTE_PROBE = """define <64 x i8> @probe(<64 x i8> %a, <64 x i8> %b) {
  %r = shufflevector <64 x i8> %a, <64 x i8> %b, <64 x i32> <MASK>
  ret <64 x i8> %r
}
""".replace("MASK", ", ".join(f"i32 {(i * 37 + 11) % 128}" for i in range(64)))


@functools.cache
def byte_lookup_class(triple: str, cpu: str, features: tuple[str, ...]) -> str:
    """``vbmi`` when LLVM lowers a 64-byte two-source shuffle to ``vpermt2b`` for this
    triple, CPU and features (a 128-entry byte table lookup per instruction), else
    ``none`` (a few ms, once per target and process)."""
    if not triple.startswith("x86_64"):
        return "none"
    asm = _lowered(triple, cpu, features, _PERMUTE_PROBE)
    return "vbmi" if "vpermt2b" in asm or "vpermi2b" in asm else "none"


def runnable_here(built: CodegenTarget, host: CodegenTarget | None = None) -> str | None:
    """None when an object for ``built`` runs on this machine (``host``: another machine's
    target, for tests), else why not (one line)."""
    host = host or host_target()
    if built.arch != host.arch:
        return f"built for {built.triple} (cpu {built.cpu}), this machine is {host.triple} (cpu {host.cpu})"
    rank = {"sse": 0, "avx2": 1, "avx512": 2, "neon": 0}
    if rank[built.isa] > rank[host.isa]:
        return (
            f"built for cpu {built.cpu} ({built.isa}, {built.vector_width} float lanes), which "
            f"this machine (cpu {host.cpu}, {host.isa}) lacks"
        )
    need = INT_DOT_FEATURES[built.int_dot]
    lacking = [f for f in need if f"+{f}" not in host.features and host.int_dot != built.int_dot]
    if lacking:
        return (
            f"built for cpu {built.cpu} with the {built.int_dot} integer dot product (LLVM "
            f"feature {', '.join(lacking)}), which this machine (cpu {host.cpu}, "
            f"{host.int_dot}) lacks"
        )
    if built.byte_lookup == "vbmi" and host.byte_lookup != "vbmi":
        return (
            f"built for cpu {built.cpu} with byte lookups (LLVM feature avx512vbmi), which "
            f"this machine (cpu {host.cpu}) lacks"
        )
    missing = sorted(set(built.features) - set(host.features))
    if missing:
        return (
            f"built for cpu {built.cpu} with {', '.join(missing)}, which this machine "
            f"(cpu {host.cpu}) lacks"
        )
    return None
