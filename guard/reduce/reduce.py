"""guard reduce: the smallest connected subgraph of a model that still shows the problem.

1. Bind the suite entry's model and its inputs (the golden's, when the suite has one, so
   the reduction starts from exactly what `guard run` fed it).
2. Record every intermediate tensor of the full model with the golden-producing reference.
3. Check the problem on the full model through the same cut machinery (all compute nodes):
   if it does not show, say so and write nothing.
4. ddmin over connected subgraphs (guard.reduce.ddmin), each candidate built and judged by
   the mode's oracle (guard.reduce.oracle).
5. Write the bundle (guard.reduce.bundle) for the smallest failing cut.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import onnx

from guard.backends import REGISTRY
from guard.backends.base import Backend
from guard.core.errors import EXIT_CHECK_FAILED, GuardError, UsageError
from guard.core.fsutil import atomic_write_text
from guard.golden.meta import Producer
from guard.golden.produce import golden_store, reference_outputs
from guard.reduce.bundle import write_bundle
from guard.reduce.ddmin import ddmin
from guard.reduce.oracle import (
    AccuracyOracle,
    Builder,
    LatencyOracle,
    Observation,
    PartitionsOracle,
)
from guard.reduce.subgraph import CutError, ModelGraph, cut, record_intermediates
from guard.reduce.summary import ReduceSummary, describe, readme, summary
from guard.run.case import prepare_model
from guard.suite import ModelEntry, Suite, load_suite
from guard.suite.model import make_inputs

DEFAULT_REGRESS_PCT = 5.0


class NotReproduced(GuardError):
    """The full model does not show the problem: nothing to reduce, nothing written."""

    exit_code = EXIT_CHECK_FAILED


def _entry(suite_path: Path, model: str) -> tuple[Suite, ModelEntry]:
    suite = load_suite(suite_path)
    for e in suite.models:
        if e.name == model:
            return suite, e
    raise UsageError(
        f"--model {model!r}: no such model in suite {suite.name}",
        where=str(suite_path),
        hint=f"Models: {', '.join(m.name for m in suite.models)}.",
    )


def _backend_name(entry: ModelEntry, wanted: str | None) -> str:
    if wanted:
        if wanted not in entry.backends:
            raise UsageError(
                f"--backend {wanted}: model {entry.name} does not run on it",
                where=entry.where,
                hint=f"Its backends: {', '.join(entry.backends)}.",
            )
        return wanted
    if "bundled" in entry.backends:
        return "bundled"
    if len(entry.backends) == 1:
        return entry.backends[0]
    raise UsageError(
        f"model {entry.name} runs on {', '.join(entry.backends)}: which one fails?",
        where=entry.where,
        hint="Pass --backend NAME.",
    )


def _latency_base(spec: Path | str | None, entry: ModelEntry, bname: str) -> tuple[ModelEntry, str]:
    """The base of a latency reduction: a suite variant file (the same backend built
    another way) or another backend's name (the backend pair: head on ``bname``)."""

    if spec is None:
        raise UsageError("--latency needs the base: a suite variant file or a backend name")
    if Path(spec).is_file():
        _, base_entry = _entry(Path(spec), entry.name)
        if bname not in base_entry.backends:
            raise UsageError(
                f"the base variant runs {entry.name} on {', '.join(base_entry.backends)}, "
                f"not {bname}",
                where=str(spec),
            )
        return base_entry, bname
    if str(spec) in REGISTRY:
        if str(spec) == bname:
            raise UsageError(
                f"--latency {spec}: the head runs on {bname} too",
                hint="Give another backend, or a suite variant file.",
            )
        return entry, str(spec)
    raise UsageError(
        f"--latency {spec}: neither a suite file nor a backend name",
        hint=f"Backends: {', '.join(sorted(REGISTRY))}.",
    )


def _full_model(
    suite: Suite, entry: ModelEntry, model_file: str | None
) -> tuple[Path, dict[str, np.ndarray]]:
    if model_file:
        entry = dataclasses.replace(
            entry,
            source=model_file if model_file.startswith("zoo:") else str(Path(model_file).resolve()),
        )
    spec, path = prepare_model(entry)
    feeds: dict[str, np.ndarray] | None = None
    try:
        golden = golden_store(suite).load(entry.name)
    except GuardError:
        golden = None  # a damaged golden: start from the suite's input description
    if golden is not None and all(
        k in golden.inputs and tuple(golden.inputs[k].shape) == tuple(s)
        for k, s in spec.shapes.items()
    ):
        feeds = {k: golden.inputs[k] for k in spec.shapes}
    if feeds is None:
        feeds = make_inputs(spec, dict(entry.inputs))
    return path, feeds


def _write_cut(model: onnx.ModelProto, workdir: Path) -> Path:
    data = model.SerializeToString()
    p = workdir / "cuts" / f"{hashlib.sha256(data).hexdigest()[:16]}.onnx"
    p.parent.mkdir(parents=True, exist_ok=True)
    if not p.exists():
        p.write_bytes(data)
    return p


def reduce_model(
    suite_path: Path,
    model: str,
    *,
    mode: str,
    model_file: str | None = None,
    backend_name: str | None = None,
    latency_base: Path | str | None = None,
    out: Path | None = None,
    regress_pct: float | None = None,
    budget_s: float = 4.0,
    max_tests: int = 400,
    backend: Backend | None = None,
    base_backend: Backend | None = None,
    clock: Any = None,
    progress: Callable[[str], None] | None = None,
) -> ReduceSummary:
    """Reduce, write the bundle, return the summary (``bundle`` names the directory).

    ``backend``/``base_backend`` replace the registry's backend objects (tests inject a
    backend with a miscompiling executor this way).
    """
    if mode not in ("accuracy", "latency", "partitions"):
        raise UsageError(f"unknown reduce mode {mode!r}")
    suite, entry = _entry(Path(suite_path), model)
    bname = _backend_name(entry, backend_name)
    base_entry, base_bname = None, bname
    if mode == "latency":
        base_entry, base_bname = _latency_base(latency_base, entry, bname)
    out = Path(out or f"reduce-{entry.name}-{bname}")
    if out.exists() and (not out.is_dir() or any(out.iterdir())):
        raise UsageError(
            "the bundle directory exists and is not empty",
            where=str(out),
            hint="Pass --out with a new directory.",
        )
    say = progress or (lambda _m: None)
    path, feeds = _full_model(suite, entry, model_file)
    full = onnx.load(str(path))
    mg = ModelGraph.of(full)
    t0 = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="guard-reduce-") as tmp:
        work = Path(tmp)
        head = Builder(entry, bname, work / "head", backend)
        oracle: Any
        if mode == "accuracy":
            oracle = AccuracyOracle(head)
        elif mode == "partitions":
            oracle = PartitionsOracle(head)
        else:
            assert base_entry is not None
            pct = (
                regress_pct
                if regress_pct is not None
                else float(
                    DEFAULT_REGRESS_PCT
                    if entry.checks.latency is None or entry.checks.latency.regress_pct is None
                    else entry.checks.latency.regress_pct
                )
            )
            oracle = LatencyOracle(
                head,
                Builder(base_entry, base_bname, work / "base", base_backend),
                pct,
                budget_s,
                clock,
            )
        say(f"recording {len(full.graph.node)} node(s)' tensors with the reference")
        values = record_intermediates(full, feeds)
        seen: dict[frozenset[int], Observation] = {}

        def observe(nodes: list[int]) -> Observation:
            key = frozenset(nodes)
            if key not in seen:
                try:
                    c = cut(mg, nodes, values)
                except CutError as exc:
                    seen[key] = Observation(False, error=str(exc))
                else:
                    seen[key] = oracle.observe(_write_cut(c.model, work), c.feeds)
                o = seen[key]
                say(
                    f"cut {len(seen)}: {len(nodes)} node(s): "
                    + ("still fails" if o.fails else f"passes ({o.error})" if o.error else "passes")
                )
            return seen[key]

        whole = observe(list(mg.compute))
        if not whole.fails:
            why = whole.error or describe(mode, whole.detail)
            raise NotReproduced(
                f"the full model {entry.name} [{bname}] does not show the problem ({why}): "
                "nothing to reduce, nothing written",
                where=str(path),
                hint="Check the mode (--accuracy/--latency/--partitions) and the suite entry.",
            )
        say(f"full model fails: {describe(mode, whole.detail)}; reducing {len(mg.compute)} node(s)")
        red = ddmin(
            mg.compute, lambda nodes: observe(nodes).fails, mg.components, max_tests=max_tests
        )
        final = cut(mg, red.nodes, values)
        final_obs = observe(red.nodes)
        final_path = _write_cut(final.model, work)

        expected, producer = reference_outputs(final_path, dict(final.feeds))
        doc = summary(
            entry,
            bname,
            mode,
            full,
            mg,
            red,
            whole,
            final_obs,
            final,
            time.monotonic() - t0,
            path,
            latency_base,
            len(seen),
        )
        doc["base_backend"] = base_bname if mode == "latency" else None
        bundle = _bundle(
            out, final, expected, producer, entry, base_entry, bname, doc, readme(doc), base_bname
        )
    doc["bundle"] = str(bundle)
    return doc


def _bundle(
    out: Path,
    final: Any,
    expected: list[np.ndarray],
    producer: Producer,
    entry: ModelEntry,
    base_entry: ModelEntry | None,
    bname: str,
    summary: ReduceSummary,
    readme: str,
    base_bname: str,
) -> Path:
    return write_bundle(
        out,
        model=final.model,
        feeds=final.feeds,
        expected=expected,
        producer=producer,
        entry=entry,
        base_entry=base_entry,
        backend=bname,
        summary=summary,
        readme=readme,
        base_backend=base_bname,
    )


def reduce_command(args: Any) -> int:
    mode = "accuracy" if args.accuracy else "partitions" if args.partitions else "latency"
    if args.max_tests < 1:
        raise UsageError(f"--max-tests must be >= 1, got {args.max_tests}")
    if args.budget_s <= 0:
        raise UsageError(f"--budget-s must be > 0, got {args.budget_s}")
    if args.json is not None and not Path(args.json).resolve().parent.is_dir():
        raise UsageError(
            f"output directory {Path(args.json).resolve().parent} does not exist",
            where=str(args.json),
            hint="Create it or choose another path.",
        )
    s = reduce_model(
        args.suite,
        args.model,
        mode=mode,
        model_file=args.model_file,
        backend_name=args.backend,
        latency_base=args.latency,
        out=args.out,
        regress_pct=args.regress_pct,
        budget_s=args.budget_s,
        max_tests=args.max_tests,
        progress=lambda m: print(f"guard reduce: {m}", file=sys.stderr),
    )
    if args.json is not None:
        atomic_write_text(
            args.json,
            json.dumps({"schema_version": 1, **s}, indent=2, sort_keys=True, default=str) + "\n",
        )
    print(
        f"{s['model']} [{s['backend']}] {s['mode']}: {s['nodes_before']} -> "
        f"{s['nodes_after']} node(s) ({', '.join(k['op'] for k in s['kept'])}); "
        f"{s['reduced']['described']}; wrote {s['bundle']}"
    )
    return 0
