"""guard.counting: the counted figure, instructions and bytes moved per inference.

- count: one artefact's counted block (``count_artefact``), the engine chosen and why
- emulator: the QEMU user-mode engine with guard's TCG plugin (``count_plugin.c``)
- pmu: the hardware-counter engine (``perf_event_open``), user-mode instructions only
- child: the Python process a counted run starts for an artefact the static runner cannot run
- kernel_ranges: the generated kernels' address ranges, for per-kernel counts
- verdict: two counts comparable or not (the fingerprint), regressed or not; a history's changes
- rows: the counted rows of a comparison document
- logged: a counted block from a logged run (its fingerprint tag and count metrics)

Which artefact a run counts, and against which baseline, is the run's (guard.run.counted).
"""
