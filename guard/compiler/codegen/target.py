"""The code generator's target: triple, CPU and features from the canonical target string.

Never the host's by accident: ``host`` was resolved to this machine's triple, CPU and
features by guard.manifest.target before it got here, and that canonical string is what
the TargetMachine is made from (and what the artefact pins). Unknown CPU or feature
names were refused there (exit 2, naming the string and LLVM's known ones).

The vector width follows the features: 16 float lanes with AVX-512F, 8 with AVX/AVX2, 4
otherwise (SSE on x86-64, NEON on AArch64).
"""

from __future__ import annotations

import functools
from dataclasses import dataclass
from typing import TYPE_CHECKING

from guard.core.errors import ModelError
from guard.manifest.target import parse_target

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
    def vector_width(self) -> int:
        f = set(self.features)
        if self.arch == "x86_64":
            if "+avx512f" in f:
                return 16
            if "+avx2" in f or "+avx" in f:
                return 8
        return 4

    @property
    def feature_string(self) -> str:
        return ",".join(self.features)

    def target_machine(self) -> llvmlite.binding.TargetMachine:
        """A fresh TargetMachine (an execution engine takes ownership of the one it gets)."""
        import llvmlite.binding as llvm

        _init_llvm()
        target = llvm.Target.from_triple(self.triple)
        return target.create_target_machine(
            cpu=self.cpu,
            features=self.feature_string,
            opt=OPT_LEVEL,
            reloc="pic",
            codemodel="default",
        )

    def to_dict(self) -> dict[str, object]:
        return {
            "triple": self.triple,
            "cpu": self.cpu,
            "features": list(self.features),
            "vector_width": self.vector_width,
            "opt_level": OPT_LEVEL,
        }


def codegen_target(canonical: str) -> CodegenTarget:
    """The target of a canonical (or raw: it is canonicalised) target string."""
    d = parse_target(canonical)
    triple = str(d["mtriple"])
    if not triple.startswith(("x86_64", "aarch64")):
        raise ModelError(
            f"target {canonical!r}: the bundled code generator emits x86_64 and aarch64 only"
        )
    return CodegenTarget(
        triple, str(d.get("mcpu") or "generic"), tuple(sorted(d.get("mattr") or ()))
    )


def host_target() -> CodegenTarget:
    return codegen_target("host")


def runnable_here(built: CodegenTarget) -> str | None:
    """None when an object for ``built`` runs on this machine, else why not (one line)."""
    host = host_target()
    if built.arch != host.arch:
        return f"built for {built.triple} (cpu {built.cpu}), this machine is {host.triple} (cpu {host.cpu})"
    missing = sorted(set(built.features) - set(host.features))
    if missing:
        return (
            f"built for cpu {built.cpu} with {', '.join(missing)}, which this machine "
            f"(cpu {host.cpu}) lacks"
        )
    return None
