"""Host speed: a fixed workload timed beside every round, so a slower machine is seen.

On a shared VM the whole machine runs slower for tens of seconds at a time (another
tenant on the host, a clock that drops): every model measured then reads 5-20% slower, and
neither the contention meter (other processes *in* this VM) nor the CPU share (this
process preempted) sees it, because nothing in the VM took the time. A workload that
never changes does see it. Measured on the 2-vCPU runner (150 s, 542 readings beside
1-thread onnxruntime runs): in the 10 s windows where mlp ran 14-21% and squeezenet 5-7%
slower than the rest, this probe's CPU part ran 15% and its memory part 22-28% slower; the
log readings correlate with the models' medians at 0.47-0.62.

Two probes, read together (``read``):

- ``host_ms``: a pure-Python integer loop (the core's speed for branchy, interpreted code)
  and copies of a 4 MiB buffer (the memory path). It depends only on the interpreter.
- ``simd_ms``: small float32 matrix products that stay in L1/L2 (the vector units, what a
  convolution feels). It depends on numpy and its BLAS. In runs where the conv models
  drifted together, the interpreter probe's slope did not follow them; this one did.

Neither depends on a backend that guard measures. ``PROBE`` names both with the
interpreter and numpy versions, and a comparison adjusts only between results that name
the same probe. The speed they read moves within seconds (consecutive readings correlate
at 0.7-0.8 on a quiet runner), so the timing loop (guard.measure.timer) reads them before
the warm-up, every ``READ_EVERY_S`` through the timed loop and after it, keeping every
reading and each probe's geometric mean per round.

A comparison of two results files (guard.stats.rounds_stats) adjusts for them: the slopes
of a model's log round medians on the probes' log readings, from the rounds within each
side, say how much of the machine's speed that model feels, and the difference is taken
at equal host speed (an analysis of covariance). Measured with eight `guard run`
processes of three models (benchmarks/flow_power.py): between processes the interpreter
probe's mean and the models' correlate at 0.85-0.94, and the adjustment cut the A/A
spread of squeezenet from 4.5% to 3.3% and of mlp from 8.1% to 7.5%. A single reading
spreads ~12%, so the within-side slopes come out diluted (about half the between-run
ones); the readings of each round say by how much, and that bounds the verdict. Where
rounds carry no reading (older results files, an injected clock) the probe's change
bounds the verdict as contention does.
"""

from __future__ import annotations

import platform
import time

import numpy as np

_LOOP = 60_000
_COPY_BYTES = 4 << 20
_COPIES = 4
_MATMUL_N = 48  # 48^3 stays under OpenBLAS's threshold for threading a product
_MATMULS = 256
# How often the timing loop reads the probes (seconds of timed loop; guard.measure.timer).
READ_EVERY_S = 0.2
# What the readings are readings of: a comparison adjusts for them only between results
# whose probes are the same (another interpreter runs the loop at another speed, another
# numpy the product on another BLAS).
PROBE = (
    f"loop {_LOOP} + {_COPIES} x {_COPY_BYTES >> 20} MiB copy; {_MATMULS} x "
    f"{_MATMUL_N}^3 float32 matmul; every {READ_EVERY_S:g} s; "
    f"{platform.python_implementation()} {platform.python_version()}, numpy {np.__version__}"
)
_src: bytearray | None = None
_dst: bytearray | None = None
_mats: tuple[np.ndarray, np.ndarray, np.ndarray] | None = None


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


def host_ms(repeats: int = 1) -> float:
    """One reading of the interpreter-and-memory probe: the best of ``repeats`` runs (ms)."""
    return min(_once() for _ in range(max(1, repeats))) * 1e3


def simd_ms() -> float:
    """One reading of the vector-unit probe: ``_MATMULS`` small float32 products (ms).

    The operands (27 KiB) stay in L1/L2, so this is the core's SIMD throughput: what a
    convolution or a GEMM feels of the machine's speed, which the interpreter loop does not.
    """
    global _mats
    if _mats is None:
        rng = np.random.default_rng(0)
        shape = (_MATMUL_N, _MATMUL_N)
        _mats = (
            rng.standard_normal(shape).astype(np.float32),
            rng.standard_normal(shape).astype(np.float32),
            np.empty(shape, np.float32),
        )
    a, b, c = _mats
    t0 = time.perf_counter()
    for _ in range(_MATMULS):
        np.matmul(a, b, out=c)
    return (time.perf_counter() - t0) * 1e3


def read() -> tuple[float, float]:
    """One reading of both probes (``host_ms``, ``simd_ms``), as the timing loop takes them."""
    return host_ms(), simd_ms()
