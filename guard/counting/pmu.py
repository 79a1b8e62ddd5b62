"""The hardware-counter engine: user-mode instructions per inference at native speed.

Where a PMU is exposed (an Arm runner with ``armv8_pmuv3``, a bare-metal x86 box),
``perf_event_open`` counts the instructions a thread retires in user mode. :func:`pmu_status`
probes it with the real system call (a disabled ``PERF_COUNT_HW_INSTRUCTIONS`` counter, user
mode only, opened and closed at once) and says why not otherwise: these VMs and GitHub's
hosted x86 runners keep the PMU in the hypervisor, where the call fails with ENOENT or
EOPNOTSUPP. guard.counting.count picks this engine (``measure.counted.engine: auto`` or
``pmu``) when the probe answers yes and the counted artefact runs natively here; else the
emulator counts, and the count says why in one line.

One counter, the same in both places that count: the static runner (``runner.c``, with
``GUARD_PMU_OUT``/``GUARD_PMU_EVENT`` in its environment) and the Python child
(guard.counting.child, :class:`Counter`). Each opens it disabled, pinned (never
multiplexed: a pinned counter that loses the PMU reads nothing) and inherited by the threads
started after it, resets and enables it just before the inference and disables it just
after, and writes one line per counted inference, ``pmu VALUE TIME_ENABLED TIME_RUNNING``;
:func:`run_native` reads them back and refuses a count whose counter did not run all the
time it was enabled. The event is a parameter (type, config): the tests drive the same code
with a software event (page faults), which these VMs do count.

A PMU counts no bytes: no portable event counts bytes loaded and stored (x86 and Arm name
their load/store events differently, and none counts bytes), so a hardware count records
them as null with the reason. Counts of one binary on one CPU agree run to run, but a
runtime picks its kernels from the CPU it runs on (onnxruntime's MLAS, glibc's memcpy), so
the fingerprint names the CPU (LLVM's name and a hash of its instruction-set features);
the model name and the kernel release are recorded, not compared (user-mode counts do not
include the kernel).
"""

from __future__ import annotations

import ctypes
import errno
import fcntl
import functools
import hashlib
import os
import platform
import struct
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from guard.counting.emulator import CountingFailed, Region, no_aslr, run_program

ENGINE = "perf_event_open"
# perf_event_open(2): the syscall number per architecture, and the attr fields used.
_SYSCALL = {"x86_64": 298, "aarch64": 241}
PERF_TYPE_HARDWARE, PERF_TYPE_SOFTWARE = 0, 1
PERF_COUNT_HW_INSTRUCTIONS = 1
PERF_COUNT_SW_PAGE_FAULTS = 2
_ATTR_SIZE = 128  # PERF_ATTR_SIZE_VER7 and below fit; the kernel reads what ``size`` says
_ATTR_SIZE_VER5 = 112
# attr.flags bits: disabled, inherit, pinned, exclude_kernel, exclude_hv.
_DISABLED, _INHERIT, _PINNED = 1 << 0, 1 << 1, 1 << 2
_EXCLUDE_KERNEL, _EXCLUDE_HV = 1 << 5, 1 << 6
_FLAGS = _DISABLED | _INHERIT | _PINNED | _EXCLUDE_KERNEL | _EXCLUDE_HV
# attr.read_format: the value, then the times enabled and running (ns).
_READ_FORMAT = 1 | 2  # PERF_FORMAT_TOTAL_TIME_ENABLED | PERF_FORMAT_TOTAL_TIME_RUNNING
# ioctls (_IO('$', n): the same number on x86_64 and aarch64).
_IOC_ENABLE, _IOC_DISABLE, _IOC_RESET = 0x2400, 0x2401, 0x2403
BYTES_NOTE = (
    "bytes moved not counted: a hardware counter counts instructions, and no portable "
    "event counts bytes loaded or stored (the emulator engine counts them)"
)


@dataclass(frozen=True)
class Event:
    """What the counter counts: ``perf_event_attr.type`` and ``config``, and a name."""

    type: int
    config: int
    name: str

    def env(self) -> str:
        """``TYPE:CONFIG``, as runner.c reads GUARD_PMU_EVENT."""
        return f"{self.type}:{self.config}"


INSTRUCTIONS = Event(PERF_TYPE_HARDWARE, PERF_COUNT_HW_INSTRUCTIONS, "instructions:u")
PAGE_FAULTS = Event(PERF_TYPE_SOFTWARE, PERF_COUNT_SW_PAGE_FAULTS, "page-faults:u")


def _syscall_number() -> int | None:
    machine = platform.machine().lower()
    return _SYSCALL.get({"amd64": "x86_64", "arm64": "aarch64"}.get(machine, machine))


class Counter:
    """One counter of ``event`` over this thread and the threads it starts afterwards.

    ``start()`` resets and enables it; ``stop()`` disables it and returns
    ``(value, time_enabled_ns, time_running_ns)``. Raises OSError when it cannot be opened.
    """

    def __init__(self, event: Event = INSTRUCTIONS) -> None:
        number = _syscall_number()
        if number is None or os.name != "posix":
            raise OSError(errno.ENOSYS, f"no perf_event_open for {platform.machine()}")
        attr = ctypes.create_string_buffer(_ATTR_SIZE)
        struct.pack_into("IIQ", attr, 0, event.type, _ATTR_SIZE_VER5, event.config)
        struct.pack_into("QQ", attr, 32, _READ_FORMAT, _FLAGS)
        libc = ctypes.CDLL(None, use_errno=True)
        libc.syscall.restype = ctypes.c_long
        fd = libc.syscall(ctypes.c_long(number), attr, ctypes.c_int(0), ctypes.c_int(-1),
                          ctypes.c_int(-1), ctypes.c_ulong(0))  # fmt: skip
        if fd < 0:
            err = ctypes.get_errno()
            raise OSError(err, os.strerror(err))
        self.fd = int(fd)

    def start(self) -> None:
        fcntl.ioctl(self.fd, _IOC_RESET, 0)
        fcntl.ioctl(self.fd, _IOC_ENABLE, 0)

    def stop(self) -> tuple[int, int, int]:
        fcntl.ioctl(self.fd, _IOC_DISABLE, 0)
        data = os.read(self.fd, 24)
        if len(data) != 24:  # a pinned counter that lost the PMU reads end of file
            return 0, 1, 0
        value, enabled, running = struct.unpack("QQQ", data)
        return value, enabled, running

    def close(self) -> None:
        os.close(self.fd)


@functools.lru_cache(maxsize=1)
def pmu_status() -> tuple[bool, str]:
    """(available, one line): can this process count its own user-mode instructions?"""
    try:
        Counter(INSTRUCTIONS).close()
    except OSError as exc:
        name = errno.errorcode.get(exc.errno or 0, str(exc.errno))
        return False, f"no hardware instruction counter here (perf_event_open: {name})"
    return True, "hardware instruction counter available (perf_event_open)"


@dataclass(frozen=True)
class PmuEngine:
    """The hardware counter on this host: the event, and the CPU that decides the counts."""

    arch: str
    cpu: str  # LLVM's name for this CPU (znver5, neoverse-n1)
    cpu_features: str  # sha256 (16 hex) of its instruction-set features
    cpu_model: str
    kernel: str
    event: Event = INSTRUCTIONS

    def fingerprint(self) -> dict[str, str]:
        return {
            "engine": ENGINE,
            "event": self.event.name,
            "cpu": self.cpu,
            "cpu_features": self.cpu_features,
            "cpu_model": self.cpu_model,
            "kernel": self.kernel,
        }


def pmu_engine(event: Event = INSTRUCTIONS) -> PmuEngine:
    """This host's counter engine (the CPU read as guard.manifest.cpu reads it)."""
    from guard.manifest.cpu import host_cpu

    cpu = host_cpu()
    features = ",".join(sorted(cpu.features))
    return PmuEngine(
        arch=cpu.arch,
        cpu=cpu.mcpu,
        cpu_features=hashlib.sha256(features.encode()).hexdigest()[:16],
        cpu_model=cpu.model or "unknown",
        kernel=platform.release(),
        event=event,
    )


def read_counts(path: Path) -> list[Region]:
    """The ``pmu VALUE ENABLED RUNNING`` lines, one Region each (no bytes: None).

    Raises CountingFailed for a count whose counter did not run all the time it was
    enabled (another user of the PMU took it: the value would be an estimate)."""
    regions: list[Region] = []
    for line in path.read_text().splitlines():
        parts = line.split()
        if len(parts) != 4 or parts[0] != "pmu":
            continue
        value, enabled, running = (int(p) for p in parts[1:])
        if running < enabled:
            raise CountingFailed(
                f"the hardware counter ran {running} of the {enabled} ns it was enabled "
                "(another user of the PMU took it): count again, or use engine: emulator"
            )
        regions.append(Region(value, None, None, None, None))
    return regions


def run_native(
    eng: PmuEngine,
    argv: Sequence[str],
    *,
    timeout_s: float,
    env: Mapping[str, str],
    out: Path,
) -> list[Region]:
    """Run ``argv`` natively; it counts with ``eng.event`` into ``out`` (GUARD_PMU_OUT).

    Returns one Region per counted inference; a crash, a non-zero exit or a run past
    ``timeout_s`` raises CountingFailed with the reason, as under the emulator."""
    full_env = {**env, "GUARD_PMU_OUT": str(out), "GUARD_PMU_EVENT": eng.event.env()}
    run_program([*no_aslr(), *argv], timeout_s=timeout_s, env=full_env)
    regions = read_counts(out) if out.is_file() else []
    if not regions:
        raise CountingFailed("the counted process counted no inference")
    return regions
