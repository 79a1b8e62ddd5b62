"""Emulated verification: run generated code for a foreign architecture under qemu-user.

guard builds AArch64 artefacts on any host. Where the host cannot execute them, a small
static runner for the target (``runner.c``, linked with the artefact's object by the
Debian cross toolchain) maps weights and inputs from files, calls the artefact's entry
and writes the outputs, under ``qemu-aarch64-static``. Numerics, partitions and arena are
checked exactly as on the host; latency is reported as not measured (``latency_ms: null``,
``latency_status: "emulated"``) and the latency checks are skipped, never passed.

- tools: which emulator and cross compiler an arch needs, and their Debian packages
- runner: build (cached by hash) and run the static runner; crashes and hangs as errors
- session: ``EmulatedSession``, the Session protocol over an ``EntryPoint``
- bundled: sessions over bundled artefacts, all-native or with host partitions
- load: ``load_session``, native when the artefact runs here, else emulated
"""

from guard.emulate.runner import EmulationFailed, PartitionServer, build_runner, run_main
from guard.emulate.session import EmulatedSession, EntryPoint, TensorSlot
from guard.emulate.tools import ToolMissing, host_arch, needs_emulation, require

__all__ = [
    "EmulatedSession",
    "EmulationFailed",
    "EntryPoint",
    "PartitionServer",
    "TensorSlot",
    "ToolMissing",
    "build_runner",
    "host_arch",
    "needs_emulation",
    "require",
    "run_main",
]
