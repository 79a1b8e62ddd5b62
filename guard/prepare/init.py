"""``guard init MODEL.onnx``: a suite entry from a model file, its golden, and the command.

The entry is derived from the model: one ``inputs`` line per graph input with its
declared shape, each symbolic dim bound to a value and named in a comment (batch-like
dims and axis 0 to 1, image height/width to 224, other dims to 16; ``--dim NAME=N``
overrides); the backends that build it on this host and reproduce the golden within the
default tolerance (the others stay in a comment with the reason); the default checks.
The golden is produced on the way, so the next ``guard run`` compares against it.

A new suite file is created, or the entry is appended to an existing one (which must load
before and after). A model that no backend builds still gets its entry, with the reasons
in comments, and init exits 2.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from guard.backends import REGISTRY
from guard.checks.evaluate import tolerance_bounds
from guard.core.errors import GuardError, UsageError
from guard.core.fsutil import atomic_write_bytes
from guard.golden import compare_outputs
from guard.golden.produce import ensure_golden, golden_store
from guard.run.case import load_case, prepare_model
from guard.suite import load_suite
from guard.suite.model import graph_inputs, load_model

# Tried in this order. TVM is left out unless asked for: untuned it builds for minutes
# and runs 17-110x slower than onnxruntime on CPU (FACTS.md), a poor first suite.
DEFAULT_BACKENDS = ("onnxruntime", "bundled")
DEFAULT_CHECKS = (
    "tolerance: {rtol: 1.0e-4, atol: 1.0e-5}",
    "latency: {regress_pct: 5}",
)
_BATCH = re.compile(r"^(n|b|bs|batch.*|.*_batch|batch_size|unk__\d+)$", re.IGNORECASE)


@dataclass
class InitResult:
    suite: Path
    model: str
    built: list[str] = field(default_factory=list)
    refused: dict[str, str] = field(default_factory=dict)  # backend -> why not
    dims: list[str] = field(default_factory=list)  # "x[0] N -> 1 (batch)"


def resolve_dims(
    model_inputs: list, overrides: dict[str, int]
) -> tuple[dict[str, list[int]], list[str]]:
    """Every input's shape with symbolic dims bound; one line per bound dim, naming it."""
    chosen: dict[str, int] = {}
    shapes: dict[str, list[int]] = {}
    lines: list[str] = []
    for gi in model_inputs:
        if not gi.ranked:
            raise UsageError(
                f"input {gi.name!r} declares no shape; guard init cannot choose one",
                hint="Re-export the model with input shapes, or write the suite by hand.",
            )
        shape = []
        for ax, d in enumerate(gi.dims):
            if isinstance(d, int) and d >= 0:
                shape.append(d)
                continue
            name = d if isinstance(d, str) and d else None
            if name is not None and name in overrides:
                value, why = overrides[name], "--dim"
            elif name is not None and name in chosen:
                value, why = chosen[name], "shared"
            elif ax == 0 or (name is not None and _BATCH.match(name)):
                value, why = 1, "batch"
            elif len(gi.dims) == 4 and ax >= 2:
                value, why = 224, "image height/width"
            else:
                value, why = 16, "length"
            if name is not None:
                chosen[name] = value
            label = name or ("negative dim" if isinstance(d, int) else "unnamed")
            lines.append(f"{gi.name}[{ax}] {label} -> {value} ({why})")
            shape.append(value)
        shapes[gi.name] = shape
    return shapes, lines


def _entry_text(
    name: str, source: str, shapes: dict[str, list[int]], dims: list[str], backends: list[str],
    refused: dict[str, str], tried: tuple[str, ...],
) -> str:  # fmt: skip
    out = [f"  - name: {name}", f"    source: {source}"]
    if shapes:
        out.append("    inputs:")
        for inp, shape in shapes.items():
            bound = [d for d in dims if d.startswith(f"{inp}[")]
            note = f"  # {'; '.join(bound)}" if bound else ""
            out.append(f"      {_yaml_key(inp)}: {{shape: {shape}}}{note}")
    out.append(f"    backends: [{', '.join(backends or refused)}]")
    out.append("    checks:")
    out += [f"      {c}" for c in DEFAULT_CHECKS]
    if not backends:  # kept, switched off: the suite still loads, the reasons are read
        out = [f"# {line}" for line in out]
    why = [f"    # {b}: not used: {' '.join(r.split())[:400]}" for b, r in refused.items()]
    why += [
        f"    # {b}: not tried (guard init --backends {','.join([*tried, b])} tries it)"
        for b in REGISTRY
        if b not in tried
    ]
    if not backends:
        why.insert(0, f"# guard init: no backend builds {name} on this host; entry left out:")
    return "\n".join(out[:2] + why + out[2:]) + "\n"


def _yaml_key(name: str) -> str:
    return name if re.match(r"^[A-Za-z_][A-Za-z0-9_.\-]*$", name) else repr(name)


def _model_name(path: Path, taken: set[str]) -> str:
    base = re.sub(r"[^A-Za-z0-9_.\-]", "_", path.stem).lstrip("._-") or "model"
    name, i = base, 2
    while name in taken:
        name, i = f"{base}-{i}", i + 1
    return name


def _write(suite_path: Path, head: str, entry: str) -> None:
    atomic_write_bytes(suite_path, (head + entry).encode())


def init_suite(
    model_path: Path,
    suite_path: Path,
    *,
    backends: tuple[str, ...] = DEFAULT_BACKENDS,
    dims: dict[str, int] | None = None,
    workdir: Path | None = None,
) -> InitResult:
    """Write (or append) the suite entry for ``model_path``, build its golden, try backends."""
    model_path, suite_path = Path(model_path).resolve(), Path(suite_path).resolve()
    model = load_model(model_path)  # a bad model is exit 2 here, before anything is written
    shapes, dim_lines = resolve_dims(graph_inputs(model, str(model_path)), dims or {})
    if suite_path.exists():
        existing = load_suite(suite_path)  # refuses to append to a suite that does not load
        head = suite_path.read_text(encoding="utf-8")
        head += "" if head.endswith("\n") else "\n"
        taken = {m.name for m in existing.models}
    else:
        suite_name = re.sub(r"[^A-Za-z0-9_.\-]", "_", suite_path.stem) or "suite"
        head = (
            f"# written by guard init {model_path.name}\n"
            f"schema_version: 1\nsuite: {suite_name}\ndefaults:\n  threads: 1\nmodels:\n"
        )
        taken = set()
    name = _model_name(model_path, taken)
    # Relative to the suite file (the suite moves with its models in a repository).
    source = os.path.relpath(model_path, suite_path.parent)
    result = InitResult(suite_path, name, dims=dim_lines)
    suite_path.parent.mkdir(parents=True, exist_ok=True)
    _write(
        suite_path, head, _entry_text(name, source, shapes, dim_lines, list(backends), {}, backends)
    )
    try:
        suite = load_suite(suite_path)
        entry = next(m for m in suite.models if m.name == name)
        spec, path = prepare_model(entry)
        golden, _ = ensure_golden(golden_store(suite), entry, spec, path)
    except GuardError as exc:
        why = str(exc).replace(f"{model_path}: ", "")  # the entry names the model already
        result.refused = {b: f"the golden reference could not run it: {why}" for b in backends}
        _write(
            suite_path,
            head,
            _entry_text(name, source, shapes, dim_lines, [], result.refused, backends),
        )
        return result
    tol = tolerance_bounds(None)
    for b in backends:
        try:
            case = load_case(entry, spec, golden, b, Path(workdir or Path.cwd()))
            got = case.session.run(case.feeds)
        except GuardError as exc:
            why = str(exc).replace(f"{model_path}: ", "")
            result.refused[b] = f"does not build or run on this host: {why}"
            continue
        num = compare_outputs([np.asarray(g) for g in got], golden.output_list, **tol)
        if not num["allclose"]:
            err = num.get("error") or f"max abs err {num['max_abs_err']:.3g}"
            result.refused[b] = (
                f"outputs differ from the golden beyond the default tolerance ({err})"
            )
            continue
        result.built.append(b)
    _write(
        suite_path,
        head,
        _entry_text(name, source, shapes, dim_lines, result.built, result.refused, backends),
    )
    return result
