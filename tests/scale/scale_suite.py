"""A small real suite for the scale tests: two zoo models on two backends, fast measures."""

from __future__ import annotations

import textwrap
from pathlib import Path

SUITE = """\
schema_version: 1
suite: {name}
defaults:
  backends: [onnxruntime, bundled]
  target: host
  threads: 1
  measure: {{warmup_s: 0.0, min_iters: 5, min_time_s: 0.01, max_time_s: 5}}
  checks:
    tolerance: {{rtol: 1.0e-4, atol: 1.0e-5}}
models:
  - name: mlp
    source: zoo:mlp
    inputs:
      x: {{shape: [1, 256], dist: normal, seed: 0}}
  - name: digits
    source: zoo:digits
    inputs:
      x: {{shape: [1, 64], dist: uniform, low: 0, high: 16, seed: 1}}
"""

CASES = {(m, b, "host") for m in ("mlp", "digits") for b in ("onnxruntime", "bundled")}


def write_suite(directory: Path, name: str = "scale") -> Path:
    path = Path(directory) / f"{name}.yaml"
    path.write_text(textwrap.dedent(SUITE.format(name=name)))
    return path
