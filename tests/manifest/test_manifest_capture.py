"""Driver, host and guard captures from fake /proc trees and a scratch git checkout."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import numpy as np
import pytest
from manifest_fakes import ARM_CPUINFO, make_root

import guard
from guard.manifest.capture import (
    capture_driver,
    capture_gpu,
    capture_guard,
    capture_host,
    parse_nvidia_proc_version,
    parse_nvidia_smi,
)

SMI_HEADER = """Sun Nov 29 13:40:01 2026
+-----------------------------------------------------------------------------------------+
| NVIDIA-SMI 570.86.15              Driver Version: 570.86.15      CUDA Version: 12.8     |
|-----------------------------------------+------------------------+----------------------+
"""
PROC_VERSION = (
    "NVRM version: NVIDIA UNIX Open Kernel Module for x86_64  570.86.15  Release Build  "
    "(dvs-builder@U16-I3-B03-4-3)  Thu Jan 23 23:05:29 UTC 2025\n"
    "GCC version:  gcc version 12.3.0 (Ubuntu 12.3.0-1ubuntu1~22.04)\n"
)


def test_driver_from_fake_proc(x86_root: Path) -> None:
    d = capture_driver(x86_root)
    assert set(d) == {"kernel", "cpu", "microcode", "blas", "gpu"}
    assert d["kernel"] == "6.8.0-1019-gcp"
    assert d["cpu"] == "Intel(R) Xeon(R) Platinum 8581C CPU @ 2.30GHz"
    assert d["microcode"] == "0x21000230"
    assert d["gpu"] is None  # no /proc/driver/nvidia, and nvidia-smi is not run on a fake root
    blas = np.show_config(mode="dicts")["Build Dependencies"]["blas"]
    assert d["blas"]["name"] == blas["name"] and d["blas"]["version"] == blas["version"]


def test_unreadable_facts_are_explicit_nulls(arm_root: Path) -> None:
    d = capture_driver(arm_root)
    assert d["microcode"] is None and d["kernel"] is None and d["gpu"] is None
    assert d["cpu"] == "implementer 0x41 part 0xd0c"  # aarch64 cpuinfo has no model name


def test_gpu_from_proc_driver_nvidia(tmp_path: Path) -> None:
    root = make_root(tmp_path, ARM_CPUINFO, proc__driver__nvidia__version=PROC_VERSION)
    assert capture_gpu(root) == {"vendor": "nvidia", "driver": "570.86.15", "cuda": None}
    assert capture_driver(root)["gpu"]["driver"] == "570.86.15"


def test_gpu_from_nvidia_smi_adds_cuda(tmp_path: Path) -> None:
    root = make_root(tmp_path, ARM_CPUINFO)
    assert capture_gpu(root, smi=SMI_HEADER) == {
        "vendor": "nvidia",
        "driver": "570.86.15",
        "cuda": "12.8",
    }
    assert capture_gpu(root, smi="garbage") is None


def test_nvidia_parsers() -> None:
    assert parse_nvidia_proc_version(PROC_VERSION) == "570.86.15"
    closed = (
        "NVRM version: NVIDIA UNIX x86_64 Kernel Module  550.54.15  Tue Mar  5 22:23:56 UTC 2024"
    )
    assert parse_nvidia_proc_version(closed) == "550.54.15"
    assert parse_nvidia_proc_version("nothing here") is None
    assert parse_nvidia_smi(SMI_HEADER) == {"driver": "570.86.15", "cuda": "12.8"}
    assert parse_nvidia_smi("") == {"driver": None, "cuda": None}


def test_host(x86_root: Path, arm_root: Path) -> None:
    h = capture_host(3, x86_root)
    assert h["arch"] == "x86_64" and h["threads"] == 3 and h["cores"] >= 1
    assert h["cpu"].startswith("Intel(R) Xeon(R)")
    assert capture_host(1, arm_root)["arch"] == "aarch64"


def _git(cwd: Path, *args: str) -> str:
    return subprocess.run(
        ["git", "-c", "user.name=t", "-c", "user.email=t@example.invalid", *args],
        cwd=cwd, check=True, capture_output=True, text=True,
    ).stdout.strip()  # fmt: skip


@pytest.mark.skipif(shutil.which("git") is None, reason="git is not installed")
def test_guard_commit_and_dirty_from_its_checkout(tmp_path: Path) -> None:
    src = tmp_path / "repo" / "guard"
    src.mkdir(parents=True)
    (src / "__init__.py").write_text("x = 1\n")
    _git(tmp_path / "repo", "init", "-q")
    _git(tmp_path / "repo", "add", ".")
    _git(tmp_path / "repo", "commit", "-q", "-m", "one")
    head = _git(tmp_path / "repo", "rev-parse", "HEAD")
    uncached = capture_guard.__wrapped__
    assert uncached(src) == {"version": guard.__version__, "commit": head, "dirty": False}
    (src / "__init__.py").write_text("x = 2\n")
    assert uncached(src)["dirty"] is True


@pytest.mark.skipif(shutil.which("git") is None, reason="git is not installed")
def test_guard_outside_its_own_checkout_has_no_commit(tmp_path: Path) -> None:
    uncached = capture_guard.__wrapped__
    plain = tmp_path / "site-packages" / "guard"
    plain.mkdir(parents=True)
    assert uncached(plain) == {"version": guard.__version__, "commit": None, "dirty": None}
    # vendored inside another project's repository: that repository's commit is not ours
    vendored = tmp_path / "other" / "vendor" / "guard"
    vendored.mkdir(parents=True)
    (vendored / "__init__.py").write_text("")
    _git(tmp_path / "other", "init", "-q")
    _git(tmp_path / "other", "add", ".")
    _git(tmp_path / "other", "commit", "-q", "-m", "x")
    assert uncached(vendored)["commit"] is None
