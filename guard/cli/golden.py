"""``guard golden update``: re-create goldens with the reference, recording why."""

from __future__ import annotations

import argparse
from pathlib import Path

from guard.core.errors import EXIT_OK, UsageError


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    g = subparsers.add_parser("golden", help="manage goldens")
    gsub = g.add_subparsers(dest="golden_command", metavar="ACTION", required=True)
    gu = gsub.add_parser("update", help="re-create goldens with the reference, recording why")
    gu.add_argument("suite")
    gu.add_argument("--reason", required=True, help="why the golden changes (recorded)")
    gu.add_argument("--model", action="append", metavar="NAME", help="only this model")
    gu.add_argument("--golden-dir", metavar="DIR")
    gu.set_defaults(func=cmd_golden_update)


def cmd_golden_update(args: argparse.Namespace) -> int:
    from guard.golden.produce import ensure_golden, golden_store
    from guard.run.case import prepare_model
    from guard.suite import load_suite

    if not args.reason or not args.reason.strip():
        raise UsageError(
            "--reason must say why the golden changes",
            hint="e.g. --reason 'onnxruntime 1.32 changed GELU fusion'.",
        )
    suite = load_suite(args.suite)
    store = golden_store(suite, Path(args.golden_dir) if args.golden_dir else None)
    names = {m.name for m in suite.models}
    for m in args.model or ():
        if m not in names:
            raise UsageError(
                f"--model {m!r}: no such model in suite {suite.name}",
                hint=f"Models: {', '.join(sorted(names))}.",
            )
    for entry in suite.models:
        if args.model and entry.name not in args.model:
            continue
        old, _ = store.load_replaceable(entry.name)
        spec, path = prepare_model(entry)
        golden, status = ensure_golden(store, entry, spec, path, update_reason=args.reason)
        if (
            old is not None
            and golden.sha256 == old.sha256
            and golden.meta.updated == old.meta.updated
        ):
            print(
                f"{entry.name}: golden unchanged {old.sha256[:12]} (same model, inputs and "
                "outputs: nothing written)"
            )
            continue
        old_sha = old.sha256[:12] if old else "none"
        print(f"{entry.name}: golden {status} {old_sha} -> {golden.sha256[:12]} ({args.reason})")
    return EXIT_OK
