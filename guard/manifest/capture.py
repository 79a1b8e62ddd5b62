"""Capture the driver, host and guard facts a manifest records.

Everything is read where it is readable and recorded as null where it is not: a field
that could not be read is an explicit null, never a missing key, so two manifests always
have the same shape and a diff says "null -> 535.104" rather than nothing.

Files are read under an injectable ``root`` (tests use a fake /proc). Captures that cost
a subprocess (nvidia-smi, git) are cached per process: they do not change during a run,
and a run builds a manifest per (model, backend, target).
"""

from __future__ import annotations

import functools
import os
import platform
import re
import shutil
import subprocess
from pathlib import Path

import guard
from guard.manifest.cpu import host_caches, host_cpu
from guard.manifest.written import BlasBuild, DriverPins, GpuDriver, GuardInfo, HostPins

_GUARD_SRC = Path(guard.__file__).resolve().parent
_SUBPROCESS_TIMEOUT_S = 10.0


def _read(path: Path) -> str | None:
    try:
        return path.read_text().strip()
    except OSError:
        return None


def _cpuinfo_value(root: Path, key: str) -> str | None:
    text = _read(root / "proc" / "cpuinfo")
    if text is None:
        return None
    for line in text.splitlines():
        k, sep, v = line.partition(":")
        if sep and k.strip() == key:
            return v.strip() or None
    return None


def _run(cmd: list[str], cwd: Path | None = None) -> str | None:
    """stdout of a command, or None when it is missing, fails or hangs."""
    try:
        out = subprocess.run(
            cmd, cwd=cwd, capture_output=True, text=True, timeout=_SUBPROCESS_TIMEOUT_S, check=False
        )
    except (OSError, subprocess.SubprocessError):
        return None
    return out.stdout if out.returncode == 0 else None


def blas_build() -> BlasBuild | None:
    """numpy's BLAS as built: {"name", "version", "config"} from numpy.show_config."""
    import numpy as np  # lazy: only a manifest being built needs it, not target parsing

    try:
        cfg = np.show_config(mode="dicts")
    except Exception:  # numpy's config module is optional in odd builds
        return None
    blas = ((cfg or {}).get("Build Dependencies") or {}).get("blas") or {}
    if not blas:
        return None
    return {
        "name": blas.get("name"),
        "version": blas.get("version"),
        "config": blas.get("openblas configuration"),
    }


def parse_nvidia_proc_version(text: str) -> str | None:
    """The kernel module version from /proc/driver/nvidia/version."""
    m = re.search(r"Kernel Module(?: for \S+)?\s+(\d+(?:\.\d+)+)", text)
    return m.group(1) if m else None


def parse_nvidia_smi(text: str) -> dict[str, str | None]:
    """Driver and CUDA version from the header of plain ``nvidia-smi`` output."""
    drv = re.search(r"Driver Version:\s*(\d+(?:\.\d+)+)", text)
    cuda = re.search(r"CUDA Version:\s*(\d+(?:\.\d+)+)", text)
    return {"driver": drv.group(1) if drv else None, "cuda": cuda.group(1) if cuda else None}


def capture_gpu(root: Path = Path("/"), *, smi: str | None = None) -> GpuDriver | None:
    """NVIDIA driver and CUDA versions where present, else None.

    ``smi`` is nvidia-smi's output (tests pass it); by default it is run when on PATH.
    """
    proc = _read(root / "proc" / "driver" / "nvidia" / "version")
    if smi is None and root == Path("/") and shutil.which("nvidia-smi"):
        smi = _run(["nvidia-smi"])
    if proc is None and not smi:
        return None
    parsed = parse_nvidia_smi(smi or "")
    driver = parsed["driver"] or (parse_nvidia_proc_version(proc) if proc else None)
    if driver is None and parsed["cuda"] is None:
        return None
    return {"vendor": "nvidia", "driver": driver, "cuda": parsed["cuda"]}


@functools.lru_cache(maxsize=4)
def capture_driver(root: Path = Path("/")) -> DriverPins:
    """{"kernel", "cpu", "microcode", "blas", "gpu"}: what sits under the runtime.

    The kernel release and microcode change scheduling and mitigations; BLAS builds differ
    in kernels chosen (numpy's OpenBLAS is what reference and fallback paths call); the GPU
    driver and CUDA version pick the GPU kernels.
    """
    kernel = _read(root / "proc" / "sys" / "kernel" / "osrelease")
    if kernel is None and root == Path("/"):
        kernel = platform.release()
    return {
        "kernel": kernel,
        "cpu": host_cpu(root).model,
        "microcode": _cpuinfo_value(root, "microcode"),
        "blas": blas_build(),
        "gpu": capture_gpu(root),
    }


def capture_host(threads: int, root: Path = Path("/")) -> HostPins:
    """{"arch", "cpu", "cores", "threads", "caches"} of the machine measuring (``caches``:
    L1d/L2/L3 bytes from sysfs, what the bundled compiler's target table reads)."""
    cpu = host_cpu(root)
    return {
        "arch": cpu.arch,
        "cpu": cpu.model,
        "cores": os.cpu_count(),
        "threads": threads,
        "caches": host_caches(root),
    }


@functools.lru_cache(maxsize=4)
def capture_guard(src: Path = _GUARD_SRC) -> GuardInfo:
    """{"version", "commit", "dirty"} of the guard that made the manifest.

    git runs in guard's own source checkout; commit and dirty are None when guard is not
    run from a checkout (an installed wheel), or when the checkout is some other
    repository that merely contains guard (a vendored copy).
    """
    out: GuardInfo = {"version": guard.__version__, "commit": None, "dirty": None}
    if shutil.which("git") is None:
        return out
    top = _run(["git", "rev-parse", "--show-toplevel"], cwd=src)
    if top is None or Path(top.strip()).resolve() != src.parent.resolve():
        return out
    commit = _run(["git", "rev-parse", "HEAD"], cwd=src)
    status = _run(["git", "status", "--porcelain", "--untracked-files=no"], cwd=src)
    if commit is None:
        return out
    out["commit"] = commit.strip()
    out["dirty"] = None if status is None else bool(status.strip())
    return out
