"""CLI for models, goldens and artefacts: golden update, manifest diff, zoo list, partition.

guard/cli/main.py calls ``register(subparsers)``; each command's ``func(args) -> int`` returns
the exit code and raises GuardError subclasses for input it cannot use.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from guard.core.errors import EXIT_CHECK_FAILED, EXIT_OK, UsageError


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Add golden, manifest, zoo and partition to guard's subcommands."""
    g = subparsers.add_parser("golden", help="manage goldens")
    gsub = g.add_subparsers(dest="golden_command", metavar="ACTION", required=True)
    gu = gsub.add_parser("update", help="re-create goldens with the reference, recording why")
    gu.add_argument("suite")
    gu.add_argument("--reason", required=True, help="why the golden changes (recorded)")
    gu.add_argument("--model", action="append", metavar="NAME", help="only this model")
    gu.add_argument("--golden-dir", metavar="DIR")
    gu.set_defaults(func=cmd_golden_update)

    m = subparsers.add_parser("manifest", help="inspect manifests")
    msub = m.add_subparsers(dest="manifest_command", metavar="ACTION", required=True)
    md = msub.add_parser("diff", help="what differs between two manifests, pins first")
    md.add_argument("a")
    md.add_argument("b")
    md.add_argument("--json", action="store_true")
    md.set_defaults(func=cmd_manifest_diff)

    z = subparsers.add_parser("zoo", help="the built-in models")
    zsub = z.add_subparsers(dest="zoo_command", metavar="ACTION", required=True)
    zl = zsub.add_parser("list", help="list zoo models")
    zl.set_defaults(func=cmd_zoo_list)

    pa = subparsers.add_parser(
        "partition",
        help="how a model partitions on the bundled compiler's backends or a delegate profile",
    )
    pa.add_argument("model", help="an .onnx file or zoo:<name>")
    pa.add_argument("--profile", help="delegate profile name or YAML file")
    pa.add_argument(
        "--input", action="append", metavar="NAME=D0,D1,..", help="bind an input's shape"
    )
    pa.add_argument("--json", action="store_true")
    pa.set_defaults(func=cmd_partition)


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
            and golden.meta.get("updated") == old.meta.get("updated")
        ):
            print(
                f"{entry.name}: golden unchanged {old.sha256[:12]} (same model, inputs and "
                "outputs: nothing written)"
            )
            continue
        old_sha = old.sha256[:12] if old else "none"
        print(f"{entry.name}: golden {status} {old_sha} -> {golden.sha256[:12]} ({args.reason})")
    return EXIT_OK


def cmd_manifest_diff(args: argparse.Namespace) -> int:
    from guard.manifest import load_manifest
    from guard.manifest.diff import diff_manifests, format_diff
    from guard.manifest.pins import is_pinned

    a, b = load_manifest(Path(args.a)), load_manifest(Path(args.b))
    d = diff_manifests(a, b)
    if args.json:
        print(json.dumps(d, indent=2, sort_keys=True, default=str))
    else:
        print(format_diff(d))
    # diff(1)'s convention: 1 when they differ where it matters (a pin: not comparable).
    return EXIT_CHECK_FAILED if any(is_pinned(f) for f in d) else EXIT_OK


def cmd_zoo_list(args: argparse.Namespace) -> int:
    from guard import zoo

    for name in zoo.list_models():
        d = zoo.describe(name)
        print(f"zoo:{name:24s} {d.get('description', '')}")
    return EXIT_OK


def cmd_partition(args: argparse.Namespace) -> int:
    from guard.compiler.partition.plan import partition_report

    shapes = {}
    for item in args.input or ():
        name, _, dims = item.partition("=")
        try:
            shapes[name] = tuple(int(d) for d in dims.split(",") if d)
        except ValueError:
            raise UsageError(f"--input {item!r}: expected NAME=D0,D1,...") from None
    model = args.model
    if model.startswith("zoo:"):
        from guard import zoo

        model = zoo.model_path(model[4:])
    from guard.core.isolate import run_isolated

    # The importer runs onnx's C++ shape inference on the user's file: a crash there is one
    # error line naming the model and the signal, not a core dump.
    report, text = run_isolated(
        partition_report, Path(model), shapes or None, args.profile, what=f"partitioning {model}"
    )
    print(json.dumps(report, indent=2, default=str) if args.json else text)
    return EXIT_OK
