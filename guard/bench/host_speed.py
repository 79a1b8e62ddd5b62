"""Host speed: a fixed workload timed beside every round, so a slower machine is seen.

On a shared VM the whole machine runs slower for tens of seconds at a time (another
tenant on the host, a clock that drops): every model measured then reads 5-20% slower, and
neither the contention meter (other processes *in* this VM) nor the CPU share (this
process preempted) sees it, because nothing in the VM took the time. A workload that
never changes does see it. Measured on the 2-vCPU runner (150 s, 542 readings beside
1-thread onnxruntime runs): in the 10 s windows where mlp ran 14-21% and squeezenet 5-7%
slower than the rest, this probe's CPU part ran 15% and its memory part 22-28% slower; the
log readings correlate with the models' medians at 0.47-0.62.

The probe is a pure-Python integer loop (the core's speed) and copies of a 4 MiB buffer
(the memory path), the best of three, in milliseconds. It depends on nothing guard
measures (no numpy, no backend), only on the interpreter, which the manifest pins. A
comparison (guard.bench.rounds_stats) uses it as it uses contention: as a bound on how far
the host alone can have moved the ratio, never to correct the ratio.
"""

from __future__ import annotations

import time

_LOOP = 60_000
_COPY_BYTES = 4 << 20
_COPIES = 4
_src: bytearray | None = None
_dst: bytearray | None = None


def _once() -> float:
    global _src, _dst
    if _src is None or _dst is None:
        _src, _dst = bytearray(_COPY_BYTES), bytearray(_COPY_BYTES)
    t0 = time.perf_counter()
    x = 0
    for i in range(_LOOP):
        x = (x * 31 + i) & 0xFFFF
    for _ in range(_COPIES):
        _dst[:] = _src
    return time.perf_counter() - t0


def host_ms(repeats: int = 3) -> float:
    """One reading of the host's speed: the best of ``repeats`` runs of the probe (ms)."""
    return min(_once() for _ in range(max(1, repeats))) * 1e3
