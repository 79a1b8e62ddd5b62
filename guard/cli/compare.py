"""CLI for comparisons: compare, ab, bump, history.

guard/cli/main.py calls ``register(subparsers)``; each command's ``func(args) -> int`` returns
the exit code and raises GuardError subclasses for input it cannot use.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

from guard.cli.calibrate import noise_for
from guard.core.errors import UsageError
from guard.stats.regress import DEFAULT_REGRESS_PCT, DEFAULT_RUN_NOISE_PCT, RegressConfig


def _stats_args(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--regress-pct",
        type=float,
        default=None,
        help=f"effect-size threshold in %% (default: each model's checks.latency.regress_pct, "
        f"else {DEFAULT_REGRESS_PCT}); a regression must also be significant",
    )
    p.add_argument(
        "--alpha",
        type=float,
        default=0.01,
        help="one-sided significance level (default %(default)s)",
    )
    p.add_argument(
        "--noise",
        type=Path,
        metavar="FILE",
        help="noise file from `guard calibrate` (default: .guard/noise/<suite>.json "
        "when it exists)",
    )
    p.add_argument("--strict", action="store_true", help="inconclusive rows also fail (exit 1)")


def _report_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--json", type=Path, metavar="PATH", help="write the comparison document")
    p.add_argument("--markdown", type=Path, metavar="PATH", help="write the Markdown report")
    p.add_argument("--html", type=Path, metavar="PATH", help="write the HTML report")
    p.add_argument("--quiet", action="store_true", help="do not print the Markdown report")


def _tracking_arg(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--tracking-uri",
        help="MLflow URI (default: MLFLOW_TRACKING_URI, else the local .guard store)",
    )


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Add compare, ab, bump and history to guard's subcommands."""
    c = subparsers.add_parser(
        "compare",
        help="is HEAD worse than BASE, beyond noise? (results files or MLflow)",
        description="guard compare [BASE] HEAD. A side is a results file (guard run --json), "
        "run:<id> (an MLflow invocation), or branch:<name> (for each model of HEAD, the "
        "latest run on that branch whose host class matches). Without BASE, the baseline is "
        "--baseline FILE, else branch:<--baseline-branch> (default main). "
        "Exit 1 when any row regressed.",
    )
    c.add_argument(
        "sides",
        nargs="+",
        metavar="SIDE",
        help="[BASE] HEAD: results file, run:<id>, or (BASE only) branch:<name>",
    )
    c.add_argument("--baseline", metavar="FILE", help="the baseline results file (instead of BASE)")
    c.add_argument(
        "--baseline-branch",
        default="main",
        help="branch whose MLflow runs are the baseline when none is given (default %(default)s)",
    )
    c.add_argument("--suite", help="suite name for branch: sides (default: the other side's)")
    c.add_argument(
        "--run-noise-pct",
        type=float,
        default=None,
        help="SD in %% of a whole run's level that its rounds cannot see (a disturbance "
        "longer than the run), added to each side (default: each result's from `guard "
        f"calibrate --runs`, else {DEFAULT_RUN_NOISE_PCT}; 0 trusts the rounds)",
    )
    _tracking_arg(c)
    _stats_args(c)
    _report_args(c)
    c.set_defaults(func=cmd_compare)

    a = subparsers.add_parser(
        "ab",
        help="interleaved A/B of two variants in one process, judged on paired ratios",
        description="Build both variants, then run them interleaved (AB, BA, ...) until the "
        "verdict is conclusive or the budget is spent. --base/--head are each a suite file "
        "(a variant: other session options, tuning cache, compiler flags) or a work "
        "directory holding that side's artefacts; unset means SUITE and the current "
        "directory. --base-ref REF (and optionally --head-ref REF, else the working tree) "
        "instead compares two commits of the suite's git repository: each side's tree, "
        "pinned environment (a cached venv when its pins differ) and, in guard's own "
        "repository, its own guard, each in a worker process, timed in alternation on "
        "this machine. Exit 1 only when a row regressed.",
    )
    a.add_argument("suite", type=Path)
    a.add_argument("--base", type=Path, help="suite variant (.yaml) or work directory")
    a.add_argument("--head", type=Path, help="suite variant (.yaml) or work directory")
    a.add_argument("--base-ref", metavar="REF", help="git commit/branch/tag of the base side")
    a.add_argument(
        "--head-ref", metavar="REF", help="git ref of the head side (default: the working tree)"
    )
    a.add_argument(
        "--env-cache",
        type=Path,
        help="where ref checkouts and venvs live (default ~/.cache/guard/envs, or GUARD_ENV_CACHE)",
    )
    a.add_argument(
        "--budget-s",
        type=float,
        default=20.0,
        help="measurement seconds per model, both sides together (default %(default)s)",
    )
    _stats_args(a)
    _report_args(a)
    a.set_defaults(func=cmd_ab)

    b = subparsers.add_parser(
        "bump",
        help="run a suite before and after a dependency bump, in two isolated venvs",
        description="guard bump onnxruntime==1.31.1 onnxruntime==1.32.0 [SUITE], or "
        "guard bump --base-pyproject OLD.toml [SUITE] to compare every pin that differs "
        "between two pyproject files (CI: the base branch's against the PR's). "
        "Exit 1 when anything regressed.",
    )
    b.add_argument(
        "items",
        nargs="*",
        metavar="PKG==VER|SUITE",
        help="PKG==OLD PKG==NEW, then the suite (default suites/smoke.yaml)",
    )
    b.add_argument(
        "--base-pyproject", type=Path, metavar="FILE", help="the old pins come from this file"
    )
    b.add_argument(
        "--head-pyproject",
        type=Path,
        metavar="FILE",
        help="the new pins (default: guard's own pyproject.toml)",
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
    b.add_argument("--timeout-s", type=float, default=1800.0, help="per suite run")
    b.add_argument(
        "--rounds",
        type=int,
        default=2,
        help="suite runs per side, in ABBA order, samples pooled (default %(default)s)",
    )
    _stats_args(b)
    _report_args(b)
    b.set_defaults(func=cmd_bump)

    h = subparsers.add_parser(
        "history", help="change points in a model's MLflow history, and creep toward its bound"
    )
    h.add_argument("suite", help="suite file (bounds come from it) or suite name")
    h.add_argument("--model", required=True)
    h.add_argument("--backend")
    h.add_argument("--branch", default="main", help="branch (default %(default)s; '' for all)")
    h.add_argument("--metric", default="latency_ms.p50")
    h.add_argument(
        "--bound",
        type=float,
        help="the metric's bound (default for latency_ms.pNN with a suite file: its "
        "checks.latency.pNN_ms for this arch)",
    )
    h.add_argument("--penalty", type=float, help="change-point penalty (default: BIC-like)")
    h.add_argument("--json", type=Path, metavar="PATH")
    _tracking_arg(h)
    h.set_defaults(func=cmd_history)


def _config(args: argparse.Namespace) -> RegressConfig:
    pct = DEFAULT_REGRESS_PCT if args.regress_pct is None else args.regress_pct
    run_noise = getattr(args, "run_noise_pct", None)
    return RegressConfig(
        regress_pct=pct,
        alpha=args.alpha,
        run_noise_pct=DEFAULT_RUN_NOISE_PCT if run_noise is None else run_noise,
    )


def _emit(cmp: dict[str, Any], args: argparse.Namespace, title: str) -> None:
    from guard.compare.reports import to_markdown, write_reports

    write_reports(cmp, json_path=args.json, md_path=args.markdown, html_path=args.html, title=title)
    if not args.quiet:
        sys.stdout.write(to_markdown(cmp, title))


def cmd_compare(args: argparse.Namespace) -> int:
    from guard.compare.baseline import is_mlflow_spec, load_side
    from guard.compare.compare import compare_docs, exit_code

    if len(args.sides) > 2:
        raise UsageError(f"expected [BASE] HEAD, got {len(args.sides)} sides")
    if len(args.sides) == 2 and args.baseline:
        raise UsageError("give BASE or --baseline, not both")
    head_spec = args.sides[-1]
    base_spec = (
        args.sides[0] if len(args.sides) == 2 else args.baseline or f"branch:{args.baseline_branch}"
    )
    if head_spec.startswith(("branch:", "mlflow:")):
        raise UsageError(f"{head_spec}: HEAD must be a results file or run:<id>")
    uri = None
    if is_mlflow_spec(base_spec) or is_mlflow_spec(head_spec):
        from guard.track import resolve_uri

        uri = resolve_uri(args.tracking_uri, Path.cwd())
    head = load_side(head_spec, uri=uri, suite=args.suite)
    base = load_side(base_spec, uri=uri, suite=args.suite, other=head)
    cmp = compare_docs(
        base,
        head,
        _config(args),
        noise=noise_for(args, head.get("suite")),
        # An explicit --run-noise-pct is the user's word for every row; else calibration's.
        run_noise=noise_for(args, head.get("suite"), "run") if args.run_noise_pct is None else None,
        suite_thresholds=args.regress_pct is None,
        base_label=base_spec,
        head_label=head_spec,
    )
    missing = cmp["summary"].get("without_rounds") or []
    if missing:
        print(
            f"guard: warning: {len(missing)} row(s) compared with a result that has no rounds "
            f"({', '.join(missing[:3])}{', ...' if len(missing) > 3 else ''}): a results file "
            "from a guard that measured in one session gets no latency verdict; re-run "
            "`guard run --json` with this guard",
            file=sys.stderr,
        )
    _emit(cmp, args, "guard compare")
    return exit_code(cmp, strict=args.strict)


def cmd_ab(args: argparse.Namespace) -> int:
    from guard.compare.ab import match_cases, run_case_pairs
    from guard.compare.compare import exit_code
    from guard.run.case import prepare_cases
    from guard.suite import load_suite

    def side(p: Path | None) -> tuple[Path, Path]:
        if p is None:
            return args.suite, Path.cwd()
        if p.is_dir():
            return args.suite, p
        if p.is_file():
            return p, Path.cwd()
        raise UsageError("neither a suite file nor a directory", where=str(p))

    if not args.suite.is_file():
        raise UsageError("no such suite file", where=str(args.suite))
    if args.head_ref and not args.base_ref:
        raise UsageError("--head-ref needs --base-ref", hint="guard ab SUITE --base-ref REF")
    if args.base_ref:
        if args.base or args.head:
            raise UsageError("give --base/--head (variants) or --base-ref (commits), not both")
        from guard.compare.ab_ref import run_ref_ab

        suite = load_suite(args.suite)
        cmp = run_ref_ab(
            args.suite,
            args.base_ref,
            args.head_ref,
            config=_config(args),
            noise=noise_for(args, suite.name, "paired"),
            budget_s=args.budget_s,
            suite_thresholds=args.regress_pct is None,
            env_cache=args.env_cache,
            threads=max(m.threads for m in suite.models),
        )
        _emit(cmp, args, "guard ab")
        return exit_code(cmp, strict=args.strict)
    (bs, bw), (hs, hw) = side(args.base), side(args.head)
    pairs = match_cases(prepare_cases(bs, bw), prepare_cases(hs, hw))
    suite_name = load_suite(args.suite).name
    cmp = run_case_pairs(
        pairs,
        _config(args),
        noise=noise_for(args, suite_name, "paired"),
        budget_s=args.budget_s,
        suite_thresholds=args.regress_pct is None,
        labels=(f"{bs}@{bw}", f"{hs}@{hw}"),
    )
    _emit(cmp, args, "guard ab")
    return exit_code(cmp, strict=args.strict)


def cmd_bump(args: argparse.Namespace) -> int:
    from guard.compare.bump import (
        REPO_ROOT,
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
    kw: dict[str, Any] = dict(
        config=_config(args),
        env_cache=args.env_cache,
        out_dir=args.out_dir,
        python=args.python,
        timeout_s=args.timeout_s,
        strict=args.strict,
        rounds=args.rounds,
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
    _emit(cmp, args, "guard bump")
    return code


def cmd_history(args: argparse.Namespace) -> int:
    from guard.compare.history import history_command

    return history_command(args)
