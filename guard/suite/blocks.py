"""One validator per block of a suite: measure, checks, inputs, options, targets, sources.

Each takes the :class:`~guard.suite.fields.Fields` of the file, the raw value and its
dotted key, and returns the validated value (merged over the inherited one where a model
overrides a default). Key sets name what each block allows.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from guard.core.budget_bytes import HINT, budget_bytes
from guard.core.json_types import JsonObject
from guard.suite.check_blocks import CheckBlocks
from guard.suite.entries import ARCHES, DISTS, InputSpec
from guard.suite.fields import MAX_INT, MAX_THREADS, Fields, show, suggest
from guard.suite.quantize import option_calibration, parse_int8_agreement, parse_quantization_check

TOP_KEYS = {"schema_version", "suite", "description", "defaults", "models", "limits"}
DEFAULT_KEYS = {
    "backends", "target", "targets", "threads", "measure", "checks", "profile", "options",
    "build_timeout_s",
}  # fmt: skip
MODEL_KEYS = {
    "limits", "name", "source", "inputs", "backends", "target", "targets", "threads", "measure",
    "checks", "profile", "options", "description", "build_timeout_s", "test_data", "quantize",
}  # fmt: skip
# Backends whose options a suite may set (guard.backends.REGISTRY, without importing it).
OPTION_BACKENDS = {"onnxruntime", "bundled", "tvm", "openvino"}
INPUT_KEYS = {"shape", "dist", "seed", "mean", "std", "low", "high", "value", "file", "key"}
# The same keys as guard.measure.MeasureConfig, which validates the values again.
MEASURE_KEYS = {
    "warmup_s",
    "min_iters",
    "min_time_s",
    "max_time_s",
    "max_warmup_iters",
    "max_iters",
    "rounds",
    "counted",
}
COUNTED_KEYS = {"inferences", "warmup", "max_s", "engine"}
# measure.counted.engine: who counts (guard.counting.count.ENGINES; auto is the default).
COUNTED_ENGINES = ("auto", "emulator", "pmu")
# check name -> allowed keys
CHECK_KEYS: dict[str, set[str]] = {
    "latency": {"p50_ms", "p90_ms", "p99_ms", "regress_pct", "strict"},
    "tolerance": {"rtol", "atol"},
    "expected": {"rtol", "atol"},
    "accuracy": {"dataset", "min_top1", "limit"},
    "partitions": {"max"},
    "arena": {"max_bytes"},
    "tuning": {"min_hit_rate"},
    "counted": {"regress_pct"},
    # the int8 row of a model with quantize: (guard.suite.quantize)
    "quantization": {"min_top1_agreement", "min_sqnr_db", "max_top1_drop"},
    "int8_agreement": {"across"},
}
# Keys a check block cannot do without (the others have defaults).
REQUIRED_CHECK_KEYS: dict[str, tuple[str, ...]] = {
    "accuracy": ("dataset",),
    "partitions": ("max",),
    "arena": ("max_bytes",),
    "tuning": ("min_hit_rate",),
}
NAME_RE = re.compile(r"\A[A-Za-z0-9][A-Za-z0-9_.\-]*\Z")


# The range of every measure field: (lowest, highest, integer). The highest are far past
# any real measurement and keep a typo (rounds: 9e15) from running for ever or holding
# billions of samples: rounds are fresh interpreters each, and samples are kept raw in a
# results file of at most 64 MiB. guard.measure.MeasureConfig checks the same table.
MEASURE_RANGES: dict[str, tuple[float, float, bool]] = {
    "warmup_s": (0.0, 86_400.0, False),
    "min_time_s": (0.0, 86_400.0, False),
    "max_time_s": (0.0, 86_400.0, False),  # > 0, below
    "min_iters": (1, 1_000_000, True),
    "max_iters": (1, 1_000_000, True),
    "max_warmup_iters": (0, 1_000_000, True),
    "rounds": (1, 1_000, True),
}
# measure.counted (guard run --counted): inferences counted, warm-up inferences, seconds.
COUNTED_RANGES: dict[str, tuple[float, float, bool]] = {
    "inferences": (1, 1_000_000, True),
    "warmup": (0, 1_000_000, True),
    "max_s": (0.0, 86_400.0, False),
}


def measure_range_error(key: str, value: float) -> str | None:
    """Why ``value`` is outside ``key``'s range (MEASURE_RANGES), or None when inside."""
    lo, hi, integer = COUNTED_RANGES[key[8:]] if key.startswith("counted.") else MEASURE_RANGES[key]
    if key in ("max_time_s", "counted.max_s") and value <= 0:
        return f"must be > 0, got {value:g}"
    if value < lo:
        return f"must be >= {lo:g}, got {value:g}"
    if value > hi:
        shown = f"{int(lo)}..{int(hi)}" if integer else f"{lo:g}..{hi:g} s"
        return f"{value:g} is out of range ({shown})"
    return None


def parse_measure(ctx: Fields, raw: Any, key: str, base: JsonObject) -> JsonObject:
    """The ``measure:`` block over ``base`` (the defaults'), each key checked against its
    range; guard.measure.timer.MeasureConfig reads it as a record."""
    block = ctx.mapping(raw, key, MEASURE_KEYS)
    out: JsonObject = dict(base)
    for k, v in block.items():
        if k == "counted":  # {inferences, warmup, max_s, engine}; guard run --counted's defaults
            body = ctx.mapping(v if v is not None else {}, f"{key}.counted", COUNTED_KEYS)
            counted: JsonObject = {}
            for c, x in body.items():
                if c == "engine":
                    if x not in COUNTED_ENGINES:
                        raise ctx.err(f"{key}.counted.engine", f"unknown engine {show(x)}",
                                      "Use auto, emulator or pmu.")  # fmt: skip
                    counted[c] = x
                    continue
                counted[c] = ctx.number(x, f"{key}.counted.{c}", integer=COUNTED_RANGES[c][2])
                why = measure_range_error(f"counted.{c}", counted[c])
                if why:
                    raise ctx.err(f"{key}.counted.{c}", why)
            out[k] = counted
            continue
        integer = MEASURE_RANGES[k][2]
        out[k] = ctx.number(v, f"{key}.{k}", integer=integer)
        why = measure_range_error(k, out[k])
        if why:
            raise ctx.err(f"{key}.{k}", why)
    if out["min_time_s"] > out["max_time_s"]:
        raise ctx.err(
            f"{key}.min_time_s",
            f"min_time_s ({out['min_time_s']}) exceeds max_time_s ({out['max_time_s']})",
        )
    if out.get("min_iters", 1) > out.get("max_iters", 100_000):
        raise ctx.err(
            f"{key}.min_iters",
            f"min_iters ({out['min_iters']}) exceeds max_iters ({out.get('max_iters', 100_000)})",
        )
    return out


def parse_arch_bound(ctx: Fields, value: Any, key: str) -> float | dict[str, float]:
    if isinstance(value, dict):
        ctx.mapping(value, key, set(ARCHES))
        return {a: ctx.number(v, f"{key}.{a}", positive=True) for a, v in value.items()}
    return ctx.number(value, key, positive=True)


def parse_checks(ctx: Fields, raw: Any, key: str, base: CheckBlocks) -> CheckBlocks:
    """The checks block merged key by key over ``base`` (a model's over the defaults')."""
    block = ctx.mapping(raw, key, set(CHECK_KEYS))
    out: dict[str, Mapping[str, object]] = dict(base.to_dict())
    for name, body in block.items():
        ck = f"{key}.{name}"
        if body is None:  # explicit null switches an inherited check off
            out.pop(name, None)
            continue
        body = ctx.mapping(body, ck, CHECK_KEYS[name])
        merged = dict(out.get(name, {}))
        if name == "quantization":
            out[name] = {**merged, **parse_quantization_check(ctx, body, ck)}
            continue
        if name == "int8_agreement":
            out[name] = parse_int8_agreement(ctx, body, ck)
            continue
        for k, v in body.items():
            kk = f"{ck}.{k}"
            if name == "latency" and k in ("p50_ms", "p90_ms", "p99_ms"):
                merged[k] = parse_arch_bound(ctx, v, kk)
            elif name == "latency" and k == "strict":  # fail a bound missed under contention
                if not isinstance(v, bool):
                    raise ctx.err(kk, f"is true or false, got {show(v)}")
                merged[k] = v
            elif name == "accuracy" and k == "dataset":
                merged[k] = parse_dataset(ctx, v, kk)
            elif name == "tuning" or (name == "accuracy" and k == "min_top1"):
                f = ctx.number(v, kk, minimum=0.0)
                if f > 1.0:
                    raise ctx.err(kk, f"is a fraction in [0, 1], got {show(v)}")
                merged[k] = f
            elif (name, k) in {
                ("partitions", "max"),
                ("arena", "max_bytes"),
                ("accuracy", "limit"),
            }:
                merged[k] = ctx.number(v, kk, integer=True, minimum=0)
            else:
                merged[k] = ctx.number(v, kk, minimum=0.0)
        for need in REQUIRED_CHECK_KEYS.get(name, ()):
            if need not in merged:
                example = {
                    "dataset": "zoo:digits-test",
                    "max": 1,
                    "max_bytes": 30000000,
                    "min_hit_rate": 1.0,
                }[need]
                raise ctx.err(
                    ck,
                    f"needs {need!r}",
                    f"e.g. {name}: {{{need}: {example}}}, or remove the block.",
                )
        out[name] = merged
    return CheckBlocks.from_dict(out)


def parse_dataset(ctx: Fields, value: Any, key: str) -> str:
    if not isinstance(value, str) or not value.startswith("zoo:") or len(value) > 200:
        raise ctx.err(key, f"expected a dataset name like 'zoo:digits-test', got {show(value)}")
    # Lazy: only a suite that names a data set pays for the registry's imports (onnx and
    # the zoo's builders); only the names are read, no data is loaded.
    from guard.zoo.registry import DATASETS

    bare = value[len("zoo:") :]
    if bare not in DATASETS:
        raise ctx.err(
            key,
            f"unknown dataset {show(value)}",
            f"Known: {', '.join('zoo:' + d for d in sorted(DATASETS))}.",
        )
    return value


def parse_options(
    ctx: Fields, raw: Any, key: str, suite_dir: Path | None = None
) -> dict[str, JsonObject]:
    """``options: {backend: {key: value}}``; the backend validates its own keys at build
    (a ``calibration`` path, relative to ``suite_dir``, is made absolute here)."""
    block = ctx.mapping(raw, key, OPTION_BACKENDS)
    out: dict[str, JsonObject] = {}
    for backend, body in block.items():
        if body is not None and not isinstance(body, dict):
            raise ctx.err(
                f"{key}.{backend}",
                f"expected a mapping of option to value, got {show(body)}",
                "e.g. options: {bundled: {tuning_cache: PATH}}.",
            )
        for k in body or {}:
            if not isinstance(k, str):
                raise ctx.err(f"{key}.{backend}", f"key {show(k)} is not a string")
        cache = (body or {}).get("tuning_cache")
        if cache is not None and (
            not isinstance(cache, str) or not cache.strip() or "\x00" in cache
        ):
            raise ctx.err(
                f"{key}.{backend}.tuning_cache",
                f"expected a path (relative to the suite file), got {show(cache)}",
                "e.g. options: {bundled: {tuning_cache: ../.guard/bundled-tuning.json}}.",
            )
        body = dict(body or {})
        # Option values the backends take as strings (or a list of them): a number or a
        # mapping is a typo, said here with the key, not a TypeError at build time.
        for k in ("profile", "pipeline", "graph_optimization_level"):
            if k in body and (not isinstance(body[k], str) or not body[k].strip()):
                raise ctx.err(f"{key}.{backend}.{k}", f"expected a name, got {show(body[k])}")
        if "memory_budget" in body and (problem := budget_bytes(body["memory_budget"])[1]):
            raise ctx.err(f"{key}.{backend}.memory_budget", problem, HINT)
        if "calibration" in body:
            where = f"{key}.{backend}"
            body["calibration"] = option_calibration(ctx, body["calibration"], where, suite_dir)
        providers = body.get("providers")
        if "providers" in body and (
            not isinstance(providers, list)
            or not providers
            or not all(isinstance(p, str) and p for p in providers)
        ):
            raise ctx.err(
                f"{key}.{backend}.providers",
                f"expected a list of execution provider names, got {show(providers)}",
                "e.g. providers: [CPUExecutionProvider].",
            )
        out[backend] = body
    return out


def parse_profile(ctx: Fields, value: Any, key: str) -> str | None:
    if value is None:
        return None
    if not isinstance(value, str) or not value.strip() or "\x00" in value:
        raise ctx.err(key, f"expected a delegate profile name or YAML file, got {show(value)}")
    return value


def parse_inputs(ctx: Fields, raw: Any, key: str) -> dict[str, InputSpec]:
    if raw is None:
        return {}
    if not isinstance(raw, dict):
        raise ctx.err(key, "expected a mapping of input name to {shape, dist, seed, ...}")
    out: dict[str, InputSpec] = {}
    for name, body in raw.items():
        if not isinstance(name, str):
            raise ctx.err(key, f"input name {show(name)} is not a string")
        ik = f"{key}.{name}"
        body = ctx.mapping(body, ik, INPUT_KEYS)
        if "file" in body or "key" in body:
            out[str(name)] = parse_file_input(ctx, body, ik, str(name))
            continue
        shape = body.get("shape")
        if shape is not None:
            if not isinstance(shape, list):
                raise ctx.err(f"{ik}.shape", f"expected a list of dims, got {show(shape)}")
            dims = []
            for i, d in enumerate(shape):
                if isinstance(d, bool) or not isinstance(d, int) or d < 0 or d > MAX_INT:
                    raise ctx.err(
                        f"{ik}.shape[{i}]", f"expected a non-negative integer, got {show(d)}"
                    )
                dims.append(d)
            shape = tuple(dims)
        dist = body.get("dist", "normal")
        if dist not in DISTS:
            raise ctx.err(
                f"{ik}.dist", f"unknown distribution {show(dist)}", suggest(str(dist), set(DISTS))
            )
        seed = ctx.number(body.get("seed", 0), f"{ik}.seed", integer=True, minimum=0)
        params: dict[str, float] = {}
        allowed_params = {
            "normal": {"mean", "std"},
            "uniform": {"low", "high"},
            "const": {"value"},
        }.get(dist, set())
        for p in ("mean", "std", "low", "high", "value"):
            if p in body:
                if p not in allowed_params:
                    raise ctx.err(
                        f"{ik}.{p}",
                        f"does not apply to dist {show(dist)}",
                        f"{dist!r} takes: {', '.join(sorted(allowed_params)) or 'nothing'}.",
                    )
                params[p] = ctx.number(body[p], f"{ik}.{p}")
        if dist == "const" and "value" not in params:
            raise ctx.err(f"{ik}.value", "dist 'const' needs a value")
        if dist == "normal" and params.get("std", 1.0) < 0:
            raise ctx.err(f"{ik}.std", "must be >= 0")
        if dist == "uniform" and params.get("low", 0.0) > params.get("high", 1.0):
            raise ctx.err(f"{ik}.low", "low exceeds high")
        out[str(name)] = InputSpec(str(name), shape, dist, int(seed), params)
    return out


def parse_file_input(ctx: Fields, body: JsonObject, ik: str, name: str) -> InputSpec:
    """``{file: PATH, key: K}``: the input's data from a .npy, .npz or TensorProto .pb file
    (the path relative to the suite file; its shape binds the input's dims)."""
    from guard.suite.data import SUFFIXES

    extra = sorted(set(body) - {"file", "key"})
    if extra:
        raise ctx.err(
            f"{ik}.{extra[0]}",
            "does not apply to an input read from a file",
            "A file input takes 'file' and, for an .npz, 'key'.",
        )
    f, key = body.get("file"), body.get("key")
    if not isinstance(f, str) or not f.strip() or "\x00" in f:
        raise ctx.err(f"{ik}.file", f"expected a path to {'/'.join(SUFFIXES)}, got {show(f)}")
    p = Path(f)
    if p.suffix not in SUFFIXES:
        raise ctx.err(f"{ik}.file", f"unknown data format {show(p.suffix)}", f"Use {SUFFIXES}.")
    if key is not None and (p.suffix != ".npz" or not isinstance(key, str) or not key):
        raise ctx.err(f"{ik}.key", "names an array of an .npz file (and only of one)")
    path = p if p.is_absolute() else ctx.path.parent / p
    return InputSpec(name, None, "file", 0, {}, file=str(path.resolve()), key=key)


def parse_test_data(
    ctx: Fields, value: Any, key: str, inputs: dict[str, InputSpec]
) -> tuple[dict[str, InputSpec], tuple[str, ...]]:
    """``test_data: DIR`` (an ONNX test_data_set_N directory): its ``input_K.pb`` feed the
    inputs (by the tensor's name, else as ``#K``, bound by position when the model is
    loaded) unless ``inputs`` names them; its ``output_K.pb`` become the expected outputs."""
    from guard.suite.data import data_set_files, tensor_name

    if not isinstance(value, str) or not value.strip() or "\x00" in value:
        raise ctx.err(key, f"expected a test_data_set_N directory, got {show(value)}")
    d = Path(value) if Path(value).is_absolute() else ctx.path.parent / value
    ins, outs = data_set_files(d.resolve())
    out = dict(inputs)
    for k, f in enumerate(ins):
        name = tensor_name(f) or f"#{k}"
        out.setdefault(name, InputSpec(name, None, "file", 0, {}, file=str(f)))
    return out, tuple(str(f) for f in outs)


def resolve_source(ctx: Fields, source: Any, key: str, suite_dir: Path) -> str:
    if not isinstance(source, str) or not source.strip():
        raise ctx.err(key, "expected 'zoo:<name>' or a path to an .onnx file")
    if source.startswith("zoo:"):
        return source
    if "\x00" in source:
        raise ctx.err(key, "path contains a NUL byte")
    p = Path(source)
    if not p.is_absolute():
        p = suite_dir / p
    try:
        return str(p.resolve())
    except (RuntimeError, OSError):  # Python 3.11 raises RuntimeError on a symlink loop
        raise ctx.err(
            key, f"{show(source)} is a symlink loop", "Point 'source' at an .onnx file."
        ) from None


def parse_targets(
    ctx: Fields, block: JsonObject, key: str, inherited: tuple[str, ...]
) -> tuple[str, ...]:
    """``target: T`` or ``targets: [T, ...]`` of a defaults or model block (not both)."""
    if "target" in block and "targets" in block:
        raise ctx.err(
            f"{key}.targets",
            "give either target or targets, not both",
            "targets: [host, ...] lists several; target: is the one-target spelling.",
        )
    if "target" in block:
        values, where = [block["target"]], f"{key}.target"
    elif "targets" in block:
        values, where = block["targets"], f"{key}.targets"
        if not isinstance(values, list) or not values:
            raise ctx.err(
                where,
                f"expected a non-empty list of target strings, got {show(values)}",
                'e.g. targets: [host, "llvm -mtriple=aarch64-linux-gnu -mattr=+neon"]',
            )
    else:
        return inherited
    out: list[str] = []
    for i, t in enumerate(values):
        tk = where if where.endswith(".target") else f"{where}[{i}]"
        if not isinstance(t, str) or not t.strip():
            raise ctx.err(tk, f"expected a target string, got {show(t)}")
        if t.strip() in out:
            raise ctx.err(tk, f"target {show(t)} is listed twice")
        out.append(t.strip())
    return tuple(out)


def parse_threads(ctx: Fields, value: Any, key: str) -> int:
    n = int(ctx.number(value, key, integer=True, positive=True))
    if n > MAX_THREADS:
        raise ctx.err(
            key,
            f"{n} threads is more than guard allows ({MAX_THREADS})",
            "Give the number of threads the deployment uses, e.g. 1 or 4.",
        )
    return n


def parse_build_timeout(ctx: Fields, value: Any, key: str) -> float:
    return float(ctx.number(value, key, positive=True))
