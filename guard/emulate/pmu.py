"""Whether this host exposes a hardware instruction counter to user space.

Where a PMU is exposed (an Arm runner with ``armv8_pmuv3``, a bare-metal x86 box),
``perf_event_open`` counts user-mode instructions at native speed. This probes it with the
real system call (a disabled counter of ``PERF_COUNT_HW_INSTRUCTIONS``, user mode only,
opened and closed at once) and says why not otherwise: these VMs and GitHub's hosted x86
runners keep the PMU in the hypervisor, where the call fails with ENOENT or EOPNOTSUPP.
guard's counted runs use the emulator either way (one engine, one fingerprint, the same
counts on every machine); the probe's answer is recorded beside each count.
"""

from __future__ import annotations

import ctypes
import errno
import functools
import os
import platform
import struct

# perf_event_open(2): the syscall number per architecture, and the attr fields used.
_SYSCALL = {"x86_64": 298, "aarch64": 241}
_PERF_TYPE_HARDWARE = 0
_PERF_COUNT_HW_INSTRUCTIONS = 1
_ATTR_SIZE = 128  # PERF_ATTR_SIZE_VER7 and below fit; the kernel reads what ``size`` says
_ATTR_SIZE_VER5 = 112
_DISABLED, _EXCLUDE_KERNEL, _EXCLUDE_HV = 1 << 0, 1 << 5, 1 << 6


@functools.lru_cache(maxsize=1)
def pmu_status() -> tuple[bool, str]:
    """(available, one line): can this process count its own user-mode instructions?"""
    machine = platform.machine().lower()
    number = _SYSCALL.get({"amd64": "x86_64", "arm64": "aarch64"}.get(machine, machine))
    if number is None or os.name != "posix":
        return False, f"no PMU probe for {machine}"
    attr = ctypes.create_string_buffer(_ATTR_SIZE)
    struct.pack_into("IIQ", attr, 0, _PERF_TYPE_HARDWARE, _ATTR_SIZE_VER5,
                     _PERF_COUNT_HW_INSTRUCTIONS)  # fmt: skip
    struct.pack_into("Q", attr, 40, _DISABLED | _EXCLUDE_KERNEL | _EXCLUDE_HV)
    libc = ctypes.CDLL(None, use_errno=True)
    libc.syscall.restype = ctypes.c_long
    fd = libc.syscall(ctypes.c_long(number), attr, ctypes.c_int(0), ctypes.c_int(-1),
                      ctypes.c_int(-1), ctypes.c_ulong(0))  # fmt: skip
    if fd >= 0:
        os.close(int(fd))
        return True, "hardware instruction counter available (perf_event_open)"
    err = ctypes.get_errno()
    name = errno.errorcode.get(err, str(err))
    return False, f"no hardware instruction counter here (perf_event_open: {name})"
