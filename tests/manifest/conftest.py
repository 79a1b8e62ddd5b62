"""Fixtures: fake /proc trees for an x86_64 and an aarch64 host."""

from __future__ import annotations

from pathlib import Path

import pytest
from manifest_fakes import ARM_CPUINFO, X86_CPUINFO, make_root


@pytest.fixture
def x86_root(tmp_path: Path) -> Path:
    return make_root(tmp_path / "x86", X86_CPUINFO, proc__sys__kernel__osrelease="6.8.0-1019-gcp\n")


@pytest.fixture
def arm_root(tmp_path: Path) -> Path:
    return make_root(tmp_path / "arm", ARM_CPUINFO)
