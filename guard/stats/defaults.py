"""The regression statistics' default thresholds, in a module of their own: the command
line shows them in its help, and must not import numpy and scipy to do so."""

from __future__ import annotations

# A 3% creep is the kind a fixed percentage on one mean misses; suites may raise it.
# ``guard compare`` and ``guard run --baseline`` use it for a model whose suite sets no
# ``checks.latency.regress_pct``.
DEFAULT_REGRESS_PCT = 3.0
# The SD of a whole run's level that its rounds cannot see (a disturbance that outlasts
# the run), per side, where `guard calibrate --runs` measured none for the result. On the
# 2-vCPU runner (benchmarks/README.md, flow_power), after the host-speed adjustment, eight
# `guard run` processes' levels still spread beyond what their rounds predict by 0-1.5%
# (inception_v1) and 1.5-2.5% (squeezenet) in the quiet minutes: at 1.5%, A/A pairs of
# the quiet runs regressed in 1 of 56 trials, at 1.0% in 3-6.
DEFAULT_RUN_NOISE_PCT = 1.5
