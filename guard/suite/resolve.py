"""A validated suite document turned into entries: defaults applied, one entry per target.

``defaults`` apply to every model; a model may set ``backends``, ``target``/``targets``,
``threads``, ``profile``, ``build_timeout_s`` (each replacing the default), ``measure``
and ``options`` (merged over the defaults key by key) and ``checks`` (each block merged
over the default block key by key; ``<check>: null`` switches an inherited check off).
A model with several targets becomes one ModelEntry per target.
"""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path
from typing import Any

from guard.core.errors import SuiteError
from guard.core.schema import Schema
from guard.suite.blocks import (
    DEFAULT_KEYS,
    MODEL_KEYS,
    NAME_RE,
    TOP_KEYS,
    parse_build_timeout,
    parse_checks,
    parse_inputs,
    parse_measure,
    parse_options,
    parse_profile,
    parse_targets,
    parse_test_data,
    parse_threads,
    resolve_source,
)
from guard.suite.check_blocks import CheckBlocks, Tolerance
from guard.suite.entries import DEFAULT_BUILD_TIMEOUT_S, DEFAULT_MEASURE, ModelEntry, Suite
from guard.suite.fields import Fields, show
from guard.suite.limits import default_limits, parse_limits
from guard.suite.quantize import INT8_TOLERANCE, QuantizeSpec, int8_name, parse_quantize

SCHEMA_VERSION = 1
SUITE = Schema(
    "suite",
    SCHEMA_VERSION,
    f"A suite starts with 'schema_version: {SCHEMA_VERSION}' and follows that contract "
    "(docs/ARCHITECTURE.md, suites/smoke.yaml).",
    error=SuiteError,
)


def parse_suite(data: Any, path: Path) -> Suite:
    """Validate a parsed YAML document; ``path`` is used for messages and relative sources."""
    ctx = Fields(path)
    top = ctx.mapping(data, "", TOP_KEYS)
    SUITE.check_version(top, SUITE.at(path))
    name = top.get("suite")
    if not isinstance(name, str) or not NAME_RE.match(name):
        raise ctx.err(
            "suite", f"expected a name of letters, digits, '_', '-', '.', got {show(name)}"
        )
    limits = parse_limits(ctx, top.get("limits"), "limits", default_limits())
    d = ctx.mapping(top.get("defaults"), "defaults", DEFAULT_KEYS)
    backends = ctx.string_list(d.get("backends", ["onnxruntime"]), "defaults.backends")
    targets = parse_targets(ctx, d, "defaults", ("host",))
    threads = parse_threads(ctx, d.get("threads", 1), "defaults.threads")
    build_timeout = parse_build_timeout(
        ctx, d.get("build_timeout_s", DEFAULT_BUILD_TIMEOUT_S), "defaults.build_timeout_s"
    )
    measure = parse_measure(ctx, d.get("measure"), "defaults.measure", DEFAULT_MEASURE)
    checks = parse_checks(ctx, d.get("checks"), "defaults.checks", CheckBlocks())
    profile = parse_profile(ctx, d.get("profile"), "defaults.profile")
    options = parse_options(ctx, d.get("options"), "defaults.options", path.parent)
    description = top.get("description", "")
    if not isinstance(description, str):
        raise ctx.err("description", f"expected a string, got {show(description)}")

    raw_models = top.get("models")
    if not isinstance(raw_models, list) or not raw_models:
        raise ctx.err("models", "expected a non-empty list of models")
    models: list[ModelEntry] = []
    seen: set[str] = set()
    for i, rm in enumerate(raw_models):
        mk = f"models[{i}]"
        m = ctx.mapping(rm, mk, MODEL_KEYS)
        mname = m.get("name")
        if not isinstance(mname, str) or not NAME_RE.match(mname):
            raise ctx.err(f"{mk}.name", f"expected a model name, got {show(mname)}")
        if mname in seen:
            raise ctx.err(f"{mk}.name", f"duplicate model name {mname!r}")
        seen.add(mname)
        if "source" not in m:
            raise ctx.err(f"{mk}.source", "missing", "Use 'zoo:<name>' or a path to an .onnx file.")
        mtargets = parse_targets(ctx, m, mk, targets)
        mopts = parse_options(ctx, m.get("options"), f"{mk}.options", path.parent)
        merged_opts = {k: dict(v) for k, v in options.items()}
        for k, v in mopts.items():
            merged_opts.setdefault(k, {}).update(v)
        mdesc = m.get("description", "")
        if not isinstance(mdesc, str):
            raise ctx.err(f"{mk}.description", f"expected a string, got {show(mdesc)}")
        minputs = parse_inputs(ctx, m.get("inputs"), f"{mk}.inputs")
        expected: tuple[str, ...] = ()
        if "test_data" in m:
            minputs, expected = parse_test_data(ctx, m["test_data"], f"{mk}.test_data", minputs)
        quant = (
            parse_quantize(ctx, m["quantize"], f"{mk}.quantize", path.parent, mname)
            if "quantize" in m
            else None
        )
        fp32_entries = [
            ModelEntry(
                name=mname,
                source=resolve_source(ctx, m["source"], f"{mk}.source", path.parent),
                inputs=minputs,
                expected=expected,
                backends=ctx.string_list(m["backends"], f"{mk}.backends")
                if "backends" in m
                else backends,
                target=mt,
                threads=parse_threads(ctx, m["threads"], f"{mk}.threads")
                if "threads" in m
                else threads,
                measure=parse_measure(ctx, m.get("measure"), f"{mk}.measure", measure),
                checks=parse_checks(ctx, m.get("checks"), f"{mk}.checks", checks),
                profile=parse_profile(ctx, m["profile"], f"{mk}.profile")
                if "profile" in m
                else profile,
                options=merged_opts,
                build_timeout_s=parse_build_timeout(
                    ctx, m["build_timeout_s"], f"{mk}.build_timeout_s"
                )
                if "build_timeout_s" in m
                else build_timeout,
                where=f"{path}: {mk} ({mname})" + (f" [{mt}]" if len(mtargets) > 1 else ""),
                suite_dir=path.parent,
                limits=parse_limits(ctx, m.get("limits"), f"{mk}.limits", limits),
            )
            for mt in mtargets
        ]
        models.extend(fp32_entries)
        if quant is not None:
            models.extend(int8_entries(ctx, fp32_entries, quant, mk, mtargets, seen))
    return Suite(name=name, path=path, sha256="", models=tuple(models), description=description)


def int8_entries(
    ctx: Fields,
    fp32: list[ModelEntry],
    quant: QuantizeSpec,
    mk: str,
    targets: tuple[str, ...],
    seen: set[str],
) -> list[ModelEntry]:
    """The ``<name>.int8`` entries a quantize: block adds (guard.suite.quantize)."""
    name = int8_name(fp32[0].name)
    if name in seen:
        raise ctx.err(
            f"{mk}.name", f"{name!r} is taken: the quantize: block adds an entry of that name"
        )
    seen.add(name)
    agreement = fp32[0].checks.int8_agreement
    across = agreement.across if agreement is not None else ()
    for t in across:
        if t not in targets:
            raise ctx.err(
                f"{mk}.checks.int8_agreement.across",
                f"target {t!r} is not one of the model's targets ({', '.join(targets)})",
                "List every target of `across` under the model's targets.",
            )
    return [
        replace(
            e,
            name=name,
            quantize=quant,
            checks=replace(
                e.checks, tolerance=e.checks.tolerance or Tolerance.from_dict(INT8_TOLERANCE)
            ),
            where=e.where.replace(f"({e.name})", f"({name})", 1),
        )
        for e in fp32
    ]
