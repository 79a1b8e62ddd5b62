"""Fake /proc trees for the manifest tests (a uniquely named helper module)."""

from __future__ import annotations

from pathlib import Path

X86_FLAGS = (
    "fpu vme de pse tsc msr sse sse2 ht syscall nx lm pni pclmulqdq ssse3 fma cx16 sse4_1 "
    "sse4_2 x2apic movbe popcnt aes xsave avx f16c rdrand hypervisor lahf_lm abm bmi1 avx2 "
    "bmi2 avx512f avx512dq avx512cd avx512bw avx512vl avx512_vnni ibpb ibrs stibp md_clear"
)
X86_CPUINFO = f"""processor\t: 0
vendor_id\t: GenuineIntel
model name\t: Intel(R) Xeon(R) Platinum 8581C CPU @ 2.30GHz
microcode\t: 0x21000230
flags\t\t: {X86_FLAGS}

processor\t: 1
model name\t: Intel(R) Xeon(R) Platinum 8581C CPU @ 2.30GHz
flags\t\t: {X86_FLAGS}
"""
ARM_CPUINFO = """processor\t: 0
BogoMIPS\t: 243.75
Features\t: fp asimd evtstrm aes pmull sha1 sha2 crc32 atomics fphp asimdhp cpuid asimdrdm lrcpc dcpop asimddp ssbs
CPU implementer\t: 0x41
CPU architecture: 8
CPU variant\t: 0x3
CPU part\t: 0xd0c
CPU revision\t: 1
"""


def make_root(base: Path, cpuinfo: str, **files: str) -> Path:
    (base / "proc").mkdir(parents=True)
    (base / "proc" / "cpuinfo").write_text(cpuinfo)
    for rel, text in files.items():
        p = base / rel.replace("__", "/")
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_text(text)
    return base
