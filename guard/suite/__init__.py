"""Suite files (contract v1, docs/ARCHITECTURE.md): loading and validation.

A suite names the models, the backends and targets they ship to, how to measure them and
which checks gate them. Every error names the file and the dotted key at fault and, for a
misspelt key, suggests the right one (exit 2).

``targets: [host, "llvm -mtriple=aarch64-linux-gnu -mattr=+neon"]`` (defaults or per model)
lists several targets; ``target:`` stays the one-target spelling, and a block gives one
or the other. A model with several targets becomes one ``ModelEntry`` per target (same
name, its own ``target``), so every (model, backend, target) is one case and one result.

The package, by job: ``read`` (the file: bounded bytes, safe YAML, ``load_suite``),
``resolve`` (the document: its schema version, defaults applied to each model, one entry
per target), ``blocks`` (one validator per block: measure, checks, inputs, options,
targets), ``fields`` (where an error is, and the value checks), ``entries`` (what a
loaded suite is: ``Suite``, ``ModelEntry``, ``InputSpec``), ``check_blocks`` (a model's
``checks:`` blocks as typed records: ``CheckBlocks``, ``LatencyBounds``, ``Tolerance``, ...).
"""

from guard.suite.entries import (
    ARCHES,
    DEFAULT_BUILD_TIMEOUT_S,
    DEFAULT_MEASURE,
    DISTS,
    InputSpec,
    ModelEntry,
    Suite,
    latency_bound,
)
from guard.suite.fields import MAX_INT, MAX_THREADS
from guard.suite.read import MAX_SUITE_BYTES, MAX_YAML_NODES, load_suite
from guard.suite.resolve import SCHEMA_VERSION, parse_suite

__all__ = [
    "ARCHES",
    "DEFAULT_BUILD_TIMEOUT_S",
    "DEFAULT_MEASURE",
    "DISTS",
    "MAX_INT",
    "MAX_SUITE_BYTES",
    "MAX_THREADS",
    "MAX_YAML_NODES",
    "SCHEMA_VERSION",
    "InputSpec",
    "ModelEntry",
    "Suite",
    "latency_bound",
    "load_suite",
    "parse_suite",
]
