"""Canonical target strings: equivalent spellings agree, different targets do not."""

from __future__ import annotations

import platform
from pathlib import Path

import pytest
from manifest_fakes import make_root

from guard.core.errors import UsageError
from guard.manifest.cpu import host_cpu
from guard.manifest.target_string import (
    canonicalize,
    parse_target,
    target_arch,
    to_tvm_dict,
)

X86_HOST = (
    "llvm -mattr=+aes,+avx,+avx2,+avx512bw,+avx512cd,+avx512dq,+avx512f,+avx512vl,"
    "+avx512vnni,+bmi,+bmi2,+f16c,+fma,+lzcnt,+movbe,+pclmul,+popcnt,+sse,+sse2,+sse3,"
    "+sse4.1,+sse4.2,+ssse3 -mcpu=x86-64-v4 -mtriple=x86_64-linux-gnu"
)
ARM_HOST = (
    "llvm -mattr=+aes,+crc,+dotprod,+fp-armv8,+fullfp16,+lse,+neon,+rcpc,+rdm,+sha2 "
    "-mcpu=neoverse-n1 -mtriple=aarch64-linux-gnu"
)


@pytest.mark.parametrize(
    "spelling",
    ["host", "native", " native ", "llvm -mcpu=native", "-mcpu=native", '{"mcpu": "native"}',
     {"kind": "llvm", "mcpu": "native"}, "llvm --mcpu=native -mtriple=x86_64-pc-linux-gnu"],
)  # fmt: skip
def test_host_spellings_resolve_to_the_real_cpu_and_features(
    x86_root: Path, spelling: object
) -> None:
    assert canonicalize(spelling, root=x86_root) == X86_HOST  # type: ignore[arg-type]


def test_host_features_leave_out_flags_that_do_not_change_code(x86_root: Path) -> None:
    mattr = parse_target("host", root=x86_root).mattr
    for noise in ("+hypervisor", "+ibpb", "+md_clear", "+fpu", "+lm"):
        assert noise not in mattr
    assert list(mattr) == sorted(mattr)


def test_aarch64_host_from_features_and_cpu_part(arm_root: Path) -> None:
    assert canonicalize("host", root=arm_root) == ARM_HOST
    assert host_cpu(arm_root).arch == "aarch64"
    # the default triple follows the host
    assert canonicalize("llvm", root=arm_root) == "llvm -mattr=+neon -mtriple=aarch64-linux-gnu"


@pytest.mark.parametrize(
    "spelling",
    [
        "llvm -mtriple=aarch64-linux-gnu -mattr=+neon",
        "llvm -mtriple=aarch64-linux-gnu",
        "llvm -mattr=neon,+neon -mtriple=aarch64-unknown-linux-gnu",
        "  llvm   --mtriple=arm64-linux-gnu  ",
        '{"kind": "llvm", "mtriple": "aarch64-linux-gnu", "mattr": ["+neon"]}',
        {"mtriple": "aarch64-linux-gnu", "mattr": "+neon"},
    ],
)
def test_aarch64_cross_spellings_agree(x86_root: Path, spelling: object) -> None:
    expected = "llvm -mattr=+neon -mtriple=aarch64-linux-gnu"
    assert canonicalize(spelling, root=x86_root) == expected  # type: ignore[arg-type]


# A Graviton3 (Neoverse-V1) /proc/cpuinfo as Linux 6.8 prints it (first CPU of 64).
GRAVITON3_CPUINFO = """processor\t: 0
BogoMIPS\t: 2100.00
Features\t: fp asimd evtstrm aes pmull sha1 sha2 crc32 atomics fphp asimdhp cpuid asimdrdm jscvt fcma lrcpc dcpop sha3 sm3 sm4 asimddp sha512 sve asimdfhm dit uscat ilrcpc flagm ssbs paca pacg dcpodp svei8mm svebf16 i8mm bf16 dgh rng
CPU implementer\t: 0x41
CPU architecture: 8
CPU variant\t: 0x1
CPU part\t: 0xd40
CPU revision\t: 1

processor\t: 1
BogoMIPS\t: 2100.00
Features\t: fp asimd evtstrm aes pmull sha1 sha2 crc32 atomics fphp asimdhp cpuid asimdrdm jscvt fcma lrcpc dcpop sha3 sm3 sm4 asimddp sha512 sve asimdfhm dit uscat ilrcpc flagm ssbs paca pacg dcpodp svei8mm svebf16 i8mm bf16 dgh rng
CPU implementer\t: 0x41
CPU architecture: 8
CPU variant\t: 0x1
CPU part\t: 0xd40
CPU revision\t: 1
"""
GRAVITON3_HOST = (
    "llvm -mattr=+aes,+bf16,+crc,+dotprod,+fp-armv8,+fp16fml,+fullfp16,+i8mm,+lse,+neon,"
    "+rcpc,+rdm,+sha2,+sha3,+sve -mcpu=neoverse-v1 -mtriple=aarch64-linux-gnu"
)


def test_recorded_graviton3_cpuinfo_resolves_cpu_and_features(tmp_path: Path) -> None:
    root = make_root(tmp_path, GRAVITON3_CPUINFO)
    cpu = host_cpu(root)
    assert cpu.arch == "aarch64"
    assert cpu.mcpu == "neoverse-v1"
    assert canonicalize("host", root=root) == GRAVITON3_HOST
    # every feature taken from cpuinfo is one LLVM knows (else the host target would be refused)
    assert canonicalize(GRAVITON3_HOST, root=root) == GRAVITON3_HOST


# (spelling, canonical) of AArch64 cross targets with cpu and extensions, from an x86 host.
AARCH64_SPELLINGS = [
    ("llvm -mtriple=aarch64-linux-gnu -mattr=+neon,+dotprod",
     "llvm -mattr=+dotprod,+neon -mtriple=aarch64-linux-gnu"),
    ("llvm -mtriple=aarch64-linux-gnu -mattr=+fp16",
     "llvm -mattr=+fullfp16,+neon -mtriple=aarch64-linux-gnu"),
    ("llvm -mattr=fullfp16 -mtriple=aarch64-unknown-linux-gnu",
     "llvm -mattr=+fullfp16,+neon -mtriple=aarch64-linux-gnu"),
    ("llvm -mtriple=aarch64-linux-gnu -mattr=+sve,+neon -mcpu=neoverse-v1",
     "llvm -mattr=+neon,+sve -mcpu=neoverse-v1 -mtriple=aarch64-linux-gnu"),
    ("llvm -mcpu=neoverse-n1 -mtriple=arm64-linux-gnu -mattr=+dotprod,+fp16,+neon",
     "llvm -mattr=+dotprod,+fullfp16,+neon -mcpu=neoverse-n1 -mtriple=aarch64-linux-gnu"),
    ({"mtriple": "aarch64-linux-gnu", "mcpu": "cortex-a76", "mattr": ["+dotprod", "simd"]},
     "llvm -mattr=+dotprod,+neon -mcpu=cortex-a76 -mtriple=aarch64-linux-gnu"),
    ("llvm -mtriple=aarch64-linux-gnu -mcpu=generic",  # LLVM's default CPU
     "llvm -mattr=+neon -mtriple=aarch64-linux-gnu"),
]  # fmt: skip


@pytest.mark.parametrize(("spelling", "canonical"), AARCH64_SPELLINGS)
def test_aarch64_spellings_round_trip(x86_root: Path, spelling: object, canonical: str) -> None:
    once = canonicalize(spelling, root=x86_root)  # type: ignore[arg-type]
    assert once == canonical
    assert canonicalize(once, root=x86_root) == once
    assert canonicalize(to_tvm_dict(once), root=x86_root) == once
    assert target_arch(once) == "aarch64"


def test_llvm_names_come_from_llvm() -> None:
    from guard.manifest.cpu import llvm_known

    known = llvm_known("aarch64-linux-gnu")
    assert known is not None
    cpus, features = known
    assert {"neoverse-n1", "neoverse-v1", "cortex-a76", "generic"} <= cpus
    assert {"neon", "dotprod", "fullfp16", "sve", "i8mm"} <= features
    assert "avx2" not in features and "znver4" not in cpus
    x86 = llvm_known("x86_64-linux-gnu")
    assert x86 is not None and "x86-64-v4" in x86[0] and "avx512f" in x86[1]


@pytest.mark.parametrize(
    ("raw", "why", "known"),
    [
        ("llvm -mtriple=aarch64-linux-gnu -mcpu=neoverse-n9", "unknown mcpu 'neoverse-n9'",
         "neoverse-n1"),
        ("llvm -mtriple=aarch64-linux-gnu -mcpu=znver4", "unknown mcpu 'znver4' for aarch64",
         "cortex-a76"),
        ("llvm -mtriple=aarch64-linux-gnu -mattr=+avx2", "unknown mattr feature 'avx2'",
         "dotprod"),
        ("llvm -mtriple=aarch64-linux-gnu -mattr=+nosuchfeature",
         "unknown mattr feature 'nosuchfeature'", "sve"),
        ("llvm -mcpu=bogus", "unknown mcpu 'bogus' for x86_64-linux-gnu", "x86-64-v3"),
        ("llvm -mattr=+neon", "unknown mattr feature 'neon' for x86_64", "avx2"),
    ],
)  # fmt: skip
def test_unknown_cpu_or_feature_names_it_and_the_known_ones(
    x86_root: Path, raw: str, why: str, known: str
) -> None:
    with pytest.raises(UsageError) as e:
        canonicalize(raw, root=x86_root)
    assert e.value.exit_code == 2
    msg = str(e.value)
    assert why in msg and "known: " in msg and known in msg.split("known: ", 1)[1]
    assert "\n" not in msg


def test_attribute_and_feature_order_do_not_matter(x86_root: Path) -> None:
    a = canonicalize(
        "llvm -mcpu=x86-64-v3 -mtriple=x86_64-linux-gnu -mattr=+fma,+avx2", root=x86_root
    )
    b = canonicalize(
        "llvm -mattr=avx2,+fma -mtriple=x86_64-pc-linux-gnu -mcpu=x86-64-v3", root=x86_root
    )
    c = canonicalize({"mattr": ["+fma", "+avx2"], "mcpu": "x86-64-v3"}, root=x86_root)
    assert a == b == c == "llvm -mattr=+avx2,+fma -mcpu=x86-64-v3 -mtriple=x86_64-linux-gnu"


def test_other_attributes_are_typed_and_sorted(x86_root: Path) -> None:
    c = canonicalize(
        '{"num-cores": 4, "mtriple": "x86_64-linux-gnu", "opt-level": "3"}', root=x86_root
    )
    assert c == "llvm -mtriple=x86_64-linux-gnu -num-cores=4 -opt-level=3"
    assert parse_target(c, root=x86_root).attrs["num-cores"] == 4
    flag = "llvm -fast-math -mtriple=x86_64-linux-gnu"
    assert canonicalize("llvm -fast-math=true", root=x86_root) == flag
    assert canonicalize({"fast-math": True}, root=x86_root) == flag
    assert parse_target(flag, root=x86_root).attrs["fast-math"] is True
    # false is the default: spelling it is the same target
    assert canonicalize("llvm -fast-math=0", root=x86_root) == "llvm -mtriple=x86_64-linux-gnu"


def test_tvm_dict_form(x86_root: Path) -> None:
    d = to_tvm_dict("llvm -fast-math -mattr=+neon -mtriple=aarch64-linux-gnu -num-cores=4")
    assert d == {
        "kind": "llvm", "mtriple": "aarch64-linux-gnu", "mattr": ["+neon"],
        "fast-math": True, "num-cores": 4,
    }  # fmt: skip


@pytest.mark.slow
def test_tvm_accepts_the_dict_form() -> None:
    tvm = pytest.importorskip("tvm")
    for raw in ("host", "llvm -mtriple=aarch64-linux-gnu -mattr=+dotprod -mcpu=neoverse-n1",
                "llvm -fast-math -num-cores=2 -opt-level=3"):  # fmt: skip
        target = tvm.target.Target(to_tvm_dict(canonicalize(raw)))
        assert str(target.kind) == "llvm"


@pytest.mark.parametrize(
    ("a", "b"),
    [
        ("llvm -mattr=+avx2", "llvm -mattr=-avx2"),
        ("llvm -mcpu=x86-64-v3", "llvm -mcpu=x86-64-v4"),
        ("llvm", "host"),  # generic is not this CPU
        ("llvm -mtriple=aarch64-linux-gnu", "llvm -mtriple=x86_64-linux-gnu"),
        ("llvm -mtriple=aarch64-linux-gnu", "llvm -mtriple=aarch64-linux-gnu -mattr=+sve"),
    ],
)
def test_different_targets_stay_different(x86_root: Path, a: str, b: str) -> None:
    assert canonicalize(a, root=x86_root) != canonicalize(b, root=x86_root)


@pytest.mark.parametrize(
    "spelling", ["host", "llvm -mtriple=aarch64-linux-gnu -mattr=+sve,+dotprod"]
)
def test_canonical_is_a_fixed_point(x86_root: Path, spelling: str) -> None:
    once = canonicalize(spelling, root=x86_root)
    assert canonicalize(once, root=x86_root) == once


@pytest.mark.parametrize(
    ("flags", "level"),
    [
        ("sse sse2 pni ssse3 sse4_1 sse4_2 popcnt cx16 lahf_lm avx avx2 bmi1 bmi2 f16c fma abm movbe", "x86-64-v3"),
        ("sse sse2 pni ssse3 sse4_1 sse4_2 popcnt cx16 lahf_lm", "x86-64-v2"),
        ("sse sse2", "x86-64"),
    ],
)  # fmt: skip
def test_x86_cpu_name_from_flags_is_the_microarchitecture_level(
    tmp_path: Path, flags: str, level: str
) -> None:
    root = make_root(tmp_path, f"model name\t: Some CPU\nflags\t\t: {flags}\n")
    assert parse_target("native", root=root).mcpu == level


def test_real_host_resolves_to_llvm_cpu_name() -> None:
    import llvmlite.binding as llvm

    parsed = parse_target("host")
    name = llvm.get_host_cpu_name()
    if name != "generic":
        assert parsed.mcpu == name
    assert target_arch(canonicalize("host")) == {"arm64": "aarch64"}.get(
        platform.machine(), platform.machine()
    )


def test_target_arch() -> None:
    assert target_arch("llvm -mattr=+neon -mtriple=aarch64-linux-gnu") == "aarch64"
    assert target_arch("llvm -mcpu=x86-64-v3 -mtriple=x86_64-linux-gnu") == "x86_64"
    with pytest.raises(UsageError, match="has no -mtriple"):
        target_arch("llvm -mcpu=x86-64-v3")


@pytest.mark.parametrize(
    ("raw", "why"),
    [
        ("", "empty target"),
        ("cuda -arch=sm_90", "kind 'cuda' is not supported"),
        ("llvm -mtriple=riscv64-linux-gnu", "'riscv64' is not one of x86_64, aarch64"),
        ("llvm -mtriple=aarch64", "not arch-vendor-os"),
        ("llvm -mtriple=aarch64-apple-darwin", "OS 'darwin' is not supported (known: linux"),
        ("llvm -mtriple=x86_64-foo-bar", "OS 'unknown' is not supported"),
        ("llvm -mtriple=x86_64-pc-windows-msvc", "OS 'windows' is not supported"),
        ("llvm mcpu=x86-64", "expected -key=value, got 'mcpu=x86-64'"),
        ("llvm -mattr=+avx2,-avx2", "both enables and disables 'avx2'"),
        ("llvm -mattr=+avx2,,+fma", "empty entry"),
        ("llvm -mcpu=", "empty value"),
        ('{"mcpu": ""}', "must be a non-empty string"),
        ("llvm -mcpu=a -mcpu=b", "given twice"),
        ("llvm -mtriple=aarch64-linux-gnu -mcpu=native", "cannot target aarch64"),
        ("{not json", "not valid JSON"),
        ("[1, 2]", "expected -key=value"),
        ('{"mattr": 5}', "mattr must be a string or a list"),
        ('{"mcpu": ["a"]}', "must be a non-empty string"),
        ('{"mcpu": "a b"}', "without spaces"),
        ("llvm -system-lib", "unknown attribute 'system-lib'"),
        ("llvm -num-core=4", "did you mean 'num-cores'?"),
        ("llvm -num-cores=four", "must be a non-negative integer"),
        ("llvm -fast-math=maybe", "must be true or false"),
        ("c -mcpu=x", "kind 'c' is not supported"),
    ],
)
def test_bad_targets_name_the_string_and_show_a_valid_one(
    x86_root: Path, raw: str, why: str
) -> None:
    with pytest.raises(UsageError) as e:
        canonicalize(raw, root=x86_root)
    msg = str(e.value)
    assert repr(raw) in msg
    assert why in msg
    assert '"llvm -mtriple=aarch64-linux-gnu -mattr=+neon"' in msg
    assert "\n" not in msg


def test_where_prefixes_the_error(x86_root: Path) -> None:
    with pytest.raises(UsageError, match=r"^smoke.yaml: models\[0\].target: target 'llvm -x='"):
        canonicalize("llvm -x=", root=x86_root, where="smoke.yaml: models[0].target")


def test_target_fields_is_parse_target_with_mattr_as_a_set() -> None:
    """The tuning-cache and doctor diffs read targets through parse_target (one parser)."""
    from guard.compiler.tuning.keys import target_difference as key_difference
    from guard.doctor.steps_tuning import target_difference as doctor_difference
    from guard.manifest.target_string import target_fields

    a = target_fields("llvm -mtriple=aarch64-linux-gnu -mattr=+sve")
    b = target_fields("llvm -mattr=+sve,+neon -mtriple=aarch64-unknown-linux-gnu")
    assert a == b == {"kind": "llvm", "mtriple": "aarch64-linux-gnu", "mattr": {"+neon", "+sve"}}
    neon = "llvm -mattr=+neon -mtriple=aarch64-linux-gnu"
    sve = "llvm -mattr=+neon,+sve -mtriple=aarch64-linux-gnu"
    assert key_difference(sve, neon) == ["+sve added"]
    assert doctor_difference(neon, sve) == "mattr +sve added"
    bad = "llvm -mcpu=no-such-cpu -mtriple=aarch64-linux-gnu"
    assert key_difference(bad, neon)[0].startswith("unreadable here (")
    assert doctor_difference(neon, bad).startswith("cannot compare them here: ")
