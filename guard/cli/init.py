"""``guard init MODEL.onnx``: a suite entry from a model file, its golden, the run command."""

from __future__ import annotations

import argparse
from pathlib import Path

from guard.core.errors import EXIT_BAD_INPUT, EXIT_OK, UsageError


def _dim(text: str) -> tuple[str, int]:
    name, sep, value = text.partition("=")
    if not sep or not name or not value.isdigit():
        raise argparse.ArgumentTypeError(f"expected NAME=N (e.g. batch=4), got {text!r}")
    return name, int(value)


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = subparsers.add_parser("init", help="start a suite from a model file")
    p.add_argument("model", help="an .onnx file")
    p.add_argument(
        "--suite",
        default="guard.yaml",
        help="the suite file to write, or to append the entry to (default: guard.yaml)",
    )
    p.add_argument(
        "--backends",
        metavar="A,B",
        help="backends to try (default: onnxruntime,bundled; tvm builds for minutes untuned)",
    )
    p.add_argument(
        "--dim",
        action="append",
        type=_dim,
        default=[],
        metavar="NAME=N",
        help="bind the symbolic dim NAME to N (repeatable); otherwise batch-like dims are 1, "
        "image height/width 224, other dims 16",
    )
    p.set_defaults(func=cmd_init)


def cmd_init(args: argparse.Namespace) -> int:
    from guard.prepare.init import DEFAULT_BACKENDS, init_suite

    backends = DEFAULT_BACKENDS
    if args.backends:
        from guard.backends import REGISTRY

        backends = tuple(b.strip() for b in args.backends.split(",") if b.strip())
        unknown = [b for b in backends if b not in REGISTRY]
        if unknown or not backends:
            raise UsageError(
                f"--backends: unknown backend {unknown[0] if unknown else args.backends!r}",
                hint=f"Use some of: {', '.join(REGISTRY)}.",
            )
    res = init_suite(Path(args.model), Path(args.suite), backends=backends, dims=dict(args.dim))
    for line in res.dims:
        print(f"guard init: bound {line}")
    for b, why in res.refused.items():
        print(f"guard init: {b}: not used: {why}")
    if not res.built:
        print(
            f"guard: error: {res.suite}: no backend builds {res.model} on this host; the entry "
            "is written switched off, with the reasons in comments"
        )
        return EXIT_BAD_INPUT
    print(f"guard init: {res.suite}: model {res.model} on {', '.join(res.built)}, golden built")
    print(f"Run it with: guard run {args.suite}")
    return EXIT_OK
