"""Descriptions and examples for every subcommand's ``--help``, kept in one table.

``document(parser)`` walks the finished parser: a subcommand without a description gets
the one below, and every subcommand gets an ``examples:`` epilog. The formatter wraps
prose and keeps example lines as written.
"""

from __future__ import annotations

import argparse
import textwrap
from collections.abc import Iterator

# "command [action]" -> (description used when the command sets none, examples)
DOCS: dict[str, tuple[str, list[str]]] = {
    "run": (
        "Build every (model, backend, target) of a suite into an artefact with a pinned "
        "manifest, check numerics against the golden, measure latency, check the bounds, "
        "write the reports asked for and log everything to MLflow. Exit 0 every check "
        "passed, 1 a check failed, 2 the suite, a model or a path could not be used, "
        "3 guard failed. Tracking that fails is a warning (results kept for `guard track "
        "push`) unless --require-tracking.",
        [
            "guard run suites/smoke.yaml --json r.json --junit junit.xml",
            "guard run suites/smoke.yaml --baseline main.json --markdown summary.md",
            "guard run --tracking-uri http://127.0.0.1:5000 --require-tracking",
            "guard run suites/smoke.yaml --counted-engine pmu --json counted.json",
        ],
    ),
    "init": (
        "Start a suite from a model file: an entry with inputs from the model's declared "
        "shapes (symbolic dims bound and named in comments; --dim NAME=N to choose), the "
        "backends that build it on this host and reproduce the golden (the others in a "
        "comment with the reason), the default checks; builds the golden and prints the "
        "command to run it. Appends to --suite when it exists. Exit 2 when no backend "
        "builds the model (the entry is still written, switched off, with the reasons).",
        [
            "guard init model.onnx",
            "guard init model.onnx --suite suites/mine.yaml --dim batch=4",
        ],
    ),
    "bisect": (
        "Find the first commit between --good and --bad whose change regressed: paired, "
        "interleaved guard ab steps (each commit's tree against --good on this runner), BAD "
        "first, then halving: 1 + ceil(log2 n) steps for n commits. Each step prints its "
        "verdict with its interval; a commit that does not build is skipped. Exit 1 naming "
        "the first regressed commit, 0 when the range holds no regression, 2 when an end "
        "does not build (naming the commit).",
        [
            "guard bisect suites/smoke.yaml --good v1.4.0 --bad HEAD",
            "guard bisect suites/smoke.yaml --good HEAD~16 --bad HEAD --budget-s 10 --json b.json",
        ],
    ),
    "profile": (
        "The top nodes by time of each result: onnxruntime's own per-node profiler (a "
        "second, profiled session, never the measured one) and the bundled backend's "
        "generated kernels, with their op, milliseconds per inference and share. RESULT is "
        "a results file or run:<id>. Exit 2 when no result carries a profile.",
        [
            "guard profile r.json",
            "guard profile r.json --backend onnxruntime --top 5 --chart top.svg",
        ],
    ),
    "golden update": (
        "Re-create the goldens of a suite's models with the reference (onnxruntime, every "
        "graph optimisation off), recording who, when, why and the old and new hashes. A "
        "golden whose model, inputs and outputs are unchanged is left as it is.",
        [
            "guard golden update suites/smoke.yaml --reason 'onnxruntime 1.32 changed GELU fusion'",
            "guard golden update suites/smoke.yaml --model mlp --reason 'new seed'",
        ],
    ),
    "manifest diff": (
        "What differs between two manifests, pinned fields first. Exit 1 when a pinned "
        "field differs (the artefacts are not comparable), 0 otherwise, 2 when a manifest "
        "cannot be read.",
        [
            "guard manifest diff .guard/artefacts/mlp/onnxruntime/KEY_A/manifest.json "
            ".guard/artefacts/mlp/onnxruntime/KEY_B/manifest.json",
            "guard manifest diff a/manifest.json b/manifest.json --json",
        ],
    ),
    "track push": (
        "Send a results file kept locally (when a tracking server was unreachable) to a "
        "tracking store; a file already logged there is not logged twice.",
        [
            "guard track push .guard/pending/smoke-20261201T084100Z.json "
            "--tracking-uri http://127.0.0.1:5000"
        ],
    ),
    "tune": (
        "Tune the bundled compiler's GEMM and convolution schedules of a suite's bundled "
        "models into the cache its options.bundled.tuning_cache names (a wall-clock budget "
        "spent by each task's share of the FLOPs, candidates ranked by a cost model, "
        "survivors measured on one thread); or, with --db, MetaSchedule-tune its tvm "
        "models into a JSON database for options.tvm.tuning_cache (the nightly job).",
        [
            "guard tune suites/tuned.yaml --budget-s 60",
            "guard tune suites/tvm.yaml --db .guard/tuning --trials 64",
        ],
    ),
    "dashboard": (
        "",
        [
            "guard dashboard smoke --out dashboards/smoke.html",
            "guard dashboard suites/smoke.yaml --tracking-uri http://127.0.0.1:5000",
        ],
    ),
    "cache show": (
        "What guard keeps per user ($GUARD_CACHE, else ~/.cache/guard): built zoo models, "
        "guard bump's environments (when kept), the notes already shown; each part's size.",
        ["guard cache show", "guard cache show --all"],
    ),
    "cache prune": (
        "Remove cache entries not written for --older-than DAYS, then the oldest until the "
        "cache fits in --max-size; --dry-run says what would go.",
        ["guard cache prune --older-than 30", "guard cache prune --max-size 2G --dry-run"],
    ),
    "schema suite": (
        "Print the suite file's JSON Schema (generated from the suite validator's tables), "
        "for editor completion and validation; see the README for the wiring.",
        ["guard schema suite"],
    ),
    "zoo list": (
        "List the built-in models (zoo:<name> in a suite's source).",
        ["guard zoo list"],
    ),
    "partition": (
        "How a model partitions on the bundled compiler's backends or a delegate profile: "
        "the partitions, the nodes that fall back and why.",
        [
            "guard partition zoo:resnet50 --profile npu-int8",
            "guard partition model.onnx --input x=1,3,224,224 --json",
        ],
    ),
    "fit": (
        "Climb the memory ladder for one model until the bundled compiler's activation arena "
        "fits a budget: a line per rung (the arena after it, the latency it costs against the "
        "unconstrained build, what it changed); exit 0 when it fits, 1 when it does not.",
        [
            "guard fit zoo:mobilenet_v2 --budget 1.5MiB",
            "guard fit model.onnx --budget 2MB --input x=1,3,640,640 --json",
        ],
    ),
    "compare": (
        "",
        [
            "guard compare base.json head.json --markdown compare.md",
            "guard compare head.json --baseline-branch main",
            "guard compare run:0123abcd head.json --strict",
        ],
    ),
    "ab": (
        "",
        ["guard ab suites/smoke.yaml --base base.yaml --head head.yaml --budget-s 30"],
    ),
    "bump": (
        "",
        [
            "guard bump onnxruntime==1.31.1 onnxruntime==1.32.0 suites/smoke.yaml",
            "guard bump --base-pyproject main-pyproject.toml suites/smoke.yaml",
        ],
    ),
    "quantize": (
        "Profile-guided int8 (Glow's scheme on the bundled compiler): the fp32 passes run, "
        "the calibration samples go through the reference interpreter recording each "
        "tensor's range and histogram, and a QDQ ONNX model (opset >= 13; onnxruntime, "
        "OpenVINO and the bundled compiler run it) is written with per-channel s8 weights "
        "and u8 activations. Prints the profile's and the data's sha256 and the tensors that "
        "lost the most (SQNR against fp32). Exit 2 for data that does not fit the model, an "
        "already quantised model, or a --profile made from another model.",
        [
            "guard quantize model.onnx --calibration calib.npz --out model.int8.onnx",
            "guard quantize zoo:digits --calibration suites/smoke.yaml --model-name digits "
            "--out digits.int8.onnx --method entropy --profile digits.profile.json",
            "guard quantize model.onnx --calibration test_data/ --out q.onnx --keep-fp32 Gemm",
        ],
    ),
    "calibrate": (
        "",
        ["guard calibrate suites/smoke.yaml --rounds 20 --round-s 1.0"],
    ),
    "history": (
        "Change points (PELT on log values, as the dashboard draws them) and creep toward "
        "the bound in a model's MLflow history, one series per backend, target and arch.",
        [
            "guard history smoke --model mlp",
            "guard history suites/smoke.yaml --model mlp --backend onnxruntime --json h.json",
        ],
    ),
    "merge": (
        "",
        ["guard merge shard-1.json shard-2.json --json all.json --junit junit.xml"],
    ),
    "doctor": (
        "",
        [
            "guard doctor base.json head.json --markdown doctor.md",
            "guard doctor branch:main head.json --model mlp --json why.json",
        ],
    ),
    "reduce": (
        "",
        [
            "guard reduce --suite suites/smoke.yaml --model mlp --backend bundled --accuracy "
            "--out repro/"
        ],
    ),
}


class HelpFormatter(argparse.HelpFormatter):
    """Wraps paragraphs of prose; lines that start with two spaces (examples) stay as is."""

    def _fill_text(self, text: str, width: int, indent: str) -> str:
        out: list[str] = []
        for block in text.split("\n\n"):
            lines = block.splitlines()
            if (
                lines
                and all(line.startswith("  ") or not line.strip() for line in lines[1:])
                and any(line.startswith("  ") for line in lines)
            ):
                out.append("\n".join(indent + line for line in lines))
            else:
                out.append(
                    textwrap.fill(
                        " ".join(block.split()),
                        width,
                        initial_indent=indent,
                        subsequent_indent=indent,
                    )
                )
        return "\n\n".join(out)


def _subcommands(
    parser: argparse.ArgumentParser, prefix: str = ""
) -> Iterator[tuple[str, argparse.ArgumentParser]]:
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for name, sub in action.choices.items():
                path = f"{prefix} {name}".strip()
                nested = [a for a in sub._actions if isinstance(a, argparse._SubParsersAction)]
                if nested:
                    yield from _subcommands(sub, path)
                else:
                    yield path, sub


def document(parser: argparse.ArgumentParser) -> None:
    """Give every leaf subcommand a description and an ``examples:`` epilog."""
    for path, sub in _subcommands(parser):
        description, examples = DOCS.get(path, ("", []))
        if not sub.description and description:
            sub.description = description
        if examples and not sub.epilog:
            sub.epilog = "examples:\n" + "\n".join(f"  {e}" for e in examples)
        sub.formatter_class = HelpFormatter


def undocumented(parser: argparse.ArgumentParser) -> list[str]:
    """Leaf subcommands still lacking a description or an example (the help test's list)."""
    return [
        path
        for path, sub in _subcommands(parser)
        if not sub.description or "examples:" not in (sub.epilog or "")
    ]
