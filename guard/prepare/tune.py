"""``guard tune SUITE`` for the bundled backend: tune every bundled model's GEMM and
convolution tasks into the cache its suite names (``options.bundled.tuning_cache``,
relative to the suite file), or ``--cache PATH``.

The budget (``--budget-s``, wall clock) is split evenly between the (model, target)
entries (what one leaves unspent carries over to the rest), and within one by each
task's share of the FLOPs (guard.compiler.tuning.tune).
A task another entry already tuned in this run is not tuned twice. Entries are merged
into the cache under a lock, so two runs on one cache keep both runs' entries.
"""

from __future__ import annotations

import argparse
import time
from collections.abc import Callable
from pathlib import Path

from guard.compiler.codegen.llvm_target import codegen_target, runnable_here
from guard.compiler.runtime.artefact import compiler_version
from guard.compiler.tuning.cache import merge_into
from guard.compiler.tuning.dispatch import weighted_speedup
from guard.compiler.tuning.tune import extract_tasks, tune_tasks
from guard.core.errors import EXIT_OK, UsageError
from guard.manifest import canonicalize
from guard.run.case import prepare_model
from guard.suite import ModelEntry, Suite


def cache_path_of(entry: ModelEntry, override: str | None) -> Path:
    if override:
        return Path(override).resolve()
    raw = (entry.options.get("bundled") or {}).get("tuning_cache")
    if not raw:
        raise UsageError(
            f"model {entry.name} has no options.bundled.tuning_cache",
            where=entry.where,
            hint="Add options: {bundled: {tuning_cache: PATH}} to the suite (PATH relative "
            "to the suite file), or pass --cache PATH.",
        )
    p = Path(str(raw))
    return (p if p.is_absolute() else entry.suite_dir / p).resolve()


def tune_bundled(
    args: argparse.Namespace,
    suite: Suite,
    out: Callable[[str], None] = print,
    clock: Callable[[], float] = time.perf_counter,
) -> int:
    chosen = [m for m in suite.models if "bundled" in m.backends
              and (not args.model or m.name in args.model)]  # fmt: skip
    if not chosen:
        raise UsageError(f"no model of suite {suite.name} lists the bundled backend"
                         + (f" among {', '.join(args.model)}" if args.model else ""),
                         where=str(suite.path), hint="Add bundled to a model's backends.")  # fmt: skip
    if args.budget_s <= 0:
        raise UsageError(f"--budget-s must be > 0, got {args.budget_s}")
    started = clock()
    done: set[tuple[str, str]] = set()
    written: dict[Path, int] = {}
    for i, entry in enumerate(chosen):
        path = cache_path_of(entry, args.cache)
        target = canonicalize(entry.target)
        tgt = codegen_target(target)
        why = runnable_here(tgt)
        if why:
            raise UsageError(
                f"{entry.name}: cannot tune for target {entry.target!r} on this machine: {why}",
                where=entry.where,
                hint="Tune on a machine of that target (the nightly job runs per runner class).",
            )
        spec, model_path = prepare_model(entry)
        opts = entry.options.get("bundled") or {}
        tasks = extract_tasks(model_path, spec.shapes, target, compiler_version(),
                              pipeline=str(opts.get("pipeline", "O2")),
                              profile=opts.get("profile", entry.profile))  # fmt: skip
        todo = [t for t in tasks if (str(path), t.key.text) not in done]
        # What earlier entries left unspent carries over to the rest; preparing this entry
        # (loading, binding, extracting its tasks) came out of its share already.
        left = max(0.0, args.budget_s - (clock() - started))
        per_entry = left / (len(chosen) - i)
        t0 = clock()
        out(f"{entry.name}: {len(tasks)} task(s) ({len(tasks) - len(todo)} tuned earlier in "
            f"this run), budget {per_entry:.0f} s")  # fmt: skip
        entries = tune_tasks(todo, tgt, per_entry, reps=args.reps, log=out, clock=clock)
        cache = merge_into(path, entries)
        done.update((str(path), t.key.text) for t in todo)
        written[path] = len(cache)
        gain = (f", kernel time default/tuned {weighted_speedup(entries):.2f}x (weighted by "
                "runtime share)" if entries else "")  # fmt: skip
        out(f"{entry.name}: {len(entries)} entr(ies) in {clock() - t0:.0f} s"
            f"{gain} -> {path}")  # fmt: skip
    for p, n in written.items():
        out(f"{p}: {n} entr(ies)")
    return EXIT_OK
