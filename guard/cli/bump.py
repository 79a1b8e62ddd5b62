"""``guard bump``: a suite before and after a dependency bump, in two isolated venvs."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from guard.cli.options import config, emit, report_args, stats_args
from guard.core.errors import UsageError


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    b = subparsers.add_parser(
        "bump",
        help="run a suite before and after a dependency bump, in two isolated venvs",
        description="guard bump onnxruntime==1.31.1 onnxruntime==1.32.0 [SUITE], or "
        "guard bump --base-lock OLD-ci.txt [SUITE] to compare every pin of guard's "
        "dependencies that differs between two constraints files (CI: the base branch's "
        "constraints/ci.txt against the PR's; --base-pyproject takes a pyproject.toml). "
        "Exit 1 when anything regressed.",
    )
    b.add_argument(
        "items",
        nargs="*",
        metavar="PKG==VER|SUITE",
        help="PKG==OLD PKG==NEW, then the suite (default suites/smoke.yaml)",
    )
    b.add_argument(
        "--base-pyproject",
        "--base-lock",
        dest="base_pyproject",
        type=Path,
        metavar="FILE",
        help="the old pins come from this file: a pyproject.toml (with the constraints/ci.txt "
        "beside it) or a constraints file",
    )
    b.add_argument(
        "--head-pyproject",
        "--head-lock",
        dest="head_pyproject",
        type=Path,
        metavar="FILE",
        help="the new pins (default: guard's own pyproject.toml and constraints/ci.txt)",
    )
    b.add_argument(
        "--env-cache",
        type=Path,
        help="where the venvs live (default ~/.cache/guard/envs, or GUARD_ENV_CACHE)",
    )
    b.add_argument(
        "--out-dir",
        type=Path,
        default=Path(".guard/bump"),
        help="results files and reports (default %(default)s)",
    )
    b.add_argument("--python", default=sys.executable, help="interpreter for the venvs")
    b.add_argument(
        "--keep-envs",
        action="store_true",
        help="keep the two venvs (a GB or more each) for the next bump of the same pins "
        "(default: removed at the end)",
    )
    b.add_argument("--timeout-s", type=float, default=1800.0, help="per suite run")
    b.add_argument(
        "--rounds",
        type=int,
        default=2,
        help="suite runs per side, in ABBA order, samples pooled (default %(default)s)",
    )
    b.add_argument(
        "--counted",
        action="store_true",
        help="also count instructions and bytes moved per inference on each side (guard run "
        "--counted): a counted row per result, exact where a timing is noise",
    )
    stats_args(b)
    report_args(b)
    b.set_defaults(func=cmd_bump)


def cmd_bump(args: argparse.Namespace) -> int:
    from guard.experiment.bump import (
        REPO_ROOT,
        BumpOptions,
        changed_pins,
        read_requirements,
        run_bump,
        run_bump_requirements,
    )

    pins = [x for x in args.items if "==" in x]
    rest = [x for x in args.items if "==" not in x]
    if len(rest) > 1:
        raise UsageError(
            f"one suite at most, got {rest}", hint="guard bump PKG==OLD PKG==NEW [SUITE]"
        )
    suite = Path(rest[0]) if rest else Path("suites/smoke.yaml")
    kw: BumpOptions = dict(
        config=config(args),
        env_cache=args.env_cache,
        out_dir=args.out_dir,
        python=args.python,
        timeout_s=args.timeout_s,
        strict=args.strict,
        rounds=args.rounds,
        keep_envs=args.keep_envs,
        counted=args.counted,
    )
    if args.rounds < 1:
        raise UsageError(f"--rounds must be >= 1, got {args.rounds}")
    if args.base_pyproject is not None:
        if pins:
            raise UsageError("give either PKG==OLD PKG==NEW or --base-pyproject, not both")
        head = args.head_pyproject or REPO_ROOT / "pyproject.toml"
        base_reqs, head_reqs = read_requirements(args.base_pyproject), read_requirements(head)
        if not changed_pins(base_reqs, head_reqs):
            # A bump of a test-only tool touches pyproject.toml too; nothing to measure.
            note = (
                "## Manifest diff\n\n- no runtime dependency pin changed "
                f"({args.base_pyproject} → {head}): nothing to measure\n"
            )
            if args.markdown:
                args.markdown.write_text(note)
            if not args.quiet:
                sys.stdout.write(note)
            return 0
        cmp, code = run_bump_requirements(base_reqs, head_reqs, suite, **kw)
    else:
        if len(pins) != 2:
            raise UsageError(
                f"expected PKG==OLD PKG==NEW, got {pins or 'no pins'}",
                hint="e.g. guard bump onnxruntime==1.31.1 onnxruntime==1.32.0",
            )
        cmp, code = run_bump(pins[0], pins[1], suite, **kw)
    emit(cmp, args, "guard bump")
    return code
