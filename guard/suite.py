"""Suite files (contract v1): loading and validation.

A suite names the models, the backends and targets they ship to, how to measure them and
which checks gate them. Every error names the file and the dotted key at fault and, for a
misspelt key, suggests the right one. Defaults apply to every model; a model may override
``backends``, ``target``, ``threads``, ``measure`` and individual ``checks`` blocks (a
model's ``latency:`` block is merged over the default one key by key; ``latency: null``
switches the check off for that model).

``targets: [host, "llvm -mtriple=aarch64-linux-gnu -mattr=+neon"]`` (defaults or per model)
lists several targets; ``target:`` stays the one-target spelling, and a block gives one
or the other. A model with several targets becomes one ``ModelEntry`` per target (same
name, its own ``target``), so every (model, backend, target) is one case and one result.
"""

from __future__ import annotations

import difflib
import hashlib
import math
import re
import reprlib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from guard.errors import SuiteError
from guard.fsutil import BoundedReadError, read_bounded

SCHEMA_VERSION = 1
ARCHES = ("x86_64", "aarch64")
DISTS = ("normal", "uniform", "zeros", "ones", "const")

_TOP_KEYS = {"schema_version", "suite", "description", "defaults", "models"}
_DEFAULT_KEYS = {
    "backends",
    "target",
    "targets",
    "threads",
    "measure",
    "checks",
    "profile",
    "options",
    "build_timeout_s",
}
_MODEL_KEYS = {
    "name",
    "source",
    "inputs",
    "backends",
    "target",
    "targets",
    "threads",
    "measure",
    "checks",
    "profile",
    "options",
    "description",
    "build_timeout_s",
}
# Backends whose options a suite may set (guard.backends.REGISTRY, without importing it).
_OPTION_BACKENDS = {"onnxruntime", "bundled", "tvm"}
_INPUT_KEYS = {"shape", "dist", "seed", "mean", "std", "low", "high", "value"}
# The same keys as guard.bench.MeasureConfig, which validates the values again.
_MEASURE_KEYS = {
    "warmup_s",
    "min_iters",
    "min_time_s",
    "max_time_s",
    "max_warmup_iters",
    "max_iters",
    "rounds",
}
# check name -> allowed keys
_CHECK_KEYS: dict[str, set[str]] = {
    "latency": {"p50_ms", "p90_ms", "p99_ms", "regress_pct"},
    "tolerance": {"rtol", "atol"},
    "accuracy": {"dataset", "min_top1", "limit"},
    "partitions": {"max"},
    "arena": {"max_bytes"},
    "tuning": {"min_hit_rate"},
}
# Keys a check block cannot do without (the others have defaults).
_REQUIRED_CHECK_KEYS: dict[str, tuple[str, ...]] = {
    "accuracy": ("dataset",),
    "partitions": ("max",),
    "arena": ("max_bytes",),
    "tuning": ("min_hit_rate",),
}
_NAME_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.\-]*$")

# Input bounds: a suite is a small hand-written file. Its bytes, and the nodes its YAML
# aliases expand to, are capped so that an alias bomb or a multi-GB file cannot exhaust
# memory while loading or while an error message shows a value.
MAX_SUITE_BYTES = 4 * 1024 * 1024
MAX_YAML_NODES = 200_000  # after alias expansion
MAX_THREADS = 1024
MAX_INT = 2**53  # integers beyond this are typos (and not exact as floats)
DEFAULT_BUILD_TIMEOUT_S = 3600.0  # per model and backend; generous: a TVM build takes minutes

_REPR = reprlib.Repr()
_REPR.maxlevel, _REPR.maxlist, _REPR.maxtuple, _REPR.maxdict = 2, 4, 4, 4
_REPR.maxstring, _REPR.maxother, _REPR.maxlong = 40, 40, 40


def _show(value: Any) -> str:
    """A short repr for messages: never expands a nested or aliased value in full."""
    text = _REPR.repr(value)
    return text if len(text) <= 80 else text[:77] + "..."


DEFAULT_MEASURE: dict[str, float] = {
    "warmup_s": 0.5,
    "min_iters": 20,
    "min_time_s": 1.0,
    "max_time_s": 20.0,
}


@dataclass(frozen=True)
class InputSpec:
    """How to bind and fill one graph input."""

    name: str
    shape: tuple[int, ...] | None
    dist: str = "normal"
    seed: int = 0
    params: dict[str, float] = field(default_factory=dict)  # mean/std, low/high, value


@dataclass(frozen=True)
class ModelEntry:
    """One model of the suite for one target, with defaults already applied."""

    name: str
    source: str  # "zoo:<name>" or an absolute path to an .onnx file
    inputs: dict[str, InputSpec]
    backends: tuple[str, ...]
    target: str
    threads: int
    measure: dict[str, float]
    checks: dict[str, dict[str, Any]]
    profile: str | None = None
    options: dict[str, Any] = field(default_factory=dict)
    build_timeout_s: float = DEFAULT_BUILD_TIMEOUT_S
    where: str = ""  # "suite.yaml: models[2]" for error messages
    suite_dir: Path = Path(".")  # relative paths in options resolve against it


@dataclass(frozen=True)
class Suite:
    name: str
    path: Path
    sha256: str
    models: tuple[ModelEntry, ...]
    description: str = ""

    @property
    def directory(self) -> Path:
        return self.path.parent


def _suggest(key: str, allowed: set[str]) -> str:
    close = difflib.get_close_matches(key, sorted(allowed), n=1, cutoff=0.6)
    if close:
        return f"Did you mean {close[0]!r}?"
    return f"Allowed keys: {', '.join(sorted(allowed))}."


class _Ctx:
    """Carries the file name so every error can say where it is."""

    def __init__(self, path: Path):
        self.path = path

    def err(self, key: str, message: str, hint: str | None = None) -> SuiteError:
        return SuiteError(
            message, where=f"{self.path}: {key}" if key else str(self.path), hint=hint
        )

    def mapping(self, value: Any, key: str, allowed: set[str]) -> dict[str, Any]:
        if value is None:
            return {}
        if not isinstance(value, dict):
            raise self.err(key, f"expected a mapping, got {type(value).__name__}")
        for k in value:
            if not isinstance(k, str):
                raise self.err(key, f"key {_show(k)} is not a string")
            if k not in allowed:
                shown = k if len(k) <= 60 else k[:57] + "..."
                raise self.err(
                    f"{key}.{shown}" if key else shown, "unknown key", _suggest(k[:100], allowed)
                )
        return value

    def number(
        self,
        value: Any,
        key: str,
        *,
        positive: bool = False,
        integer: bool = False,
        minimum: float | None = None,
    ) -> float:
        if isinstance(value, bool) or not isinstance(value, int | float):
            raise self.err(key, f"expected a number, got {_show(value)}")
        if isinstance(value, float) and not math.isfinite(value):
            raise self.err(
                key,
                f"expected a finite number, got {_show(value)}",
                "Infinite or NaN bounds would switch the check off; remove the key "
                "or give a number.",
            )
        if abs(value) > MAX_INT:
            raise self.err(key, f"{_show(value)} is out of range (at most {MAX_INT})")
        if integer and not float(value).is_integer():
            raise self.err(key, f"expected an integer, got {_show(value)}")
        if positive and value <= 0:
            raise self.err(key, f"must be > 0, got {_show(value)}")
        if minimum is not None and value < minimum:
            raise self.err(key, f"must be >= {minimum}, got {_show(value)}")
        return int(value) if integer else float(value)

    def string_list(self, value: Any, key: str) -> tuple[str, ...]:
        if isinstance(value, str):
            value = [value]
        if not isinstance(value, list) or not value or not all(isinstance(v, str) for v in value):
            raise self.err(key, f"expected a non-empty list of names, got {_show(value)}")
        return tuple(value)


def _parse_measure(ctx: _Ctx, raw: Any, key: str, base: dict[str, float]) -> dict[str, float]:
    block = ctx.mapping(raw, key, _MEASURE_KEYS)
    out = dict(base)
    for k, v in block.items():
        out[k] = ctx.number(
            v,
            f"{key}.{k}",
            integer=k in ("min_iters", "max_warmup_iters", "max_iters", "rounds"),
            minimum=0 if k == "warmup_s" else None,
            positive=k != "warmup_s",
        )
    if out["min_time_s"] > out["max_time_s"]:
        raise ctx.err(
            f"{key}.min_time_s",
            f"min_time_s ({out['min_time_s']}) exceeds max_time_s ({out['max_time_s']})",
        )
    return out


def _parse_arch_bound(ctx: _Ctx, value: Any, key: str) -> float | dict[str, float]:
    if isinstance(value, dict):
        ctx.mapping(value, key, set(ARCHES))
        return {a: ctx.number(v, f"{key}.{a}", positive=True) for a, v in value.items()}
    return ctx.number(value, key, positive=True)


def _parse_checks(
    ctx: _Ctx, raw: Any, key: str, base: dict[str, dict[str, Any]]
) -> dict[str, dict[str, Any]]:
    block = ctx.mapping(raw, key, set(_CHECK_KEYS))
    out = {k: dict(v) for k, v in base.items()}
    for name, body in block.items():
        ck = f"{key}.{name}"
        if body is None:  # explicit null switches an inherited check off
            out.pop(name, None)
            continue
        body = ctx.mapping(body, ck, _CHECK_KEYS[name])
        merged = dict(out.get(name, {}))
        for k, v in body.items():
            kk = f"{ck}.{k}"
            if name == "latency" and k in ("p50_ms", "p90_ms", "p99_ms"):
                merged[k] = _parse_arch_bound(ctx, v, kk)
            elif name == "accuracy" and k == "dataset":
                merged[k] = _parse_dataset(ctx, v, kk)
            elif name == "tuning" or (name == "accuracy" and k == "min_top1"):
                f = ctx.number(v, kk, minimum=0.0)
                if f > 1.0:
                    raise ctx.err(kk, f"is a fraction in [0, 1], got {_show(v)}")
                merged[k] = f
            elif (name, k) in {
                ("partitions", "max"),
                ("arena", "max_bytes"),
                ("accuracy", "limit"),
            }:
                merged[k] = ctx.number(v, kk, integer=True, minimum=0)
            else:
                merged[k] = ctx.number(v, kk, minimum=0.0)
        for need in _REQUIRED_CHECK_KEYS.get(name, ()):
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
    return out


def _parse_dataset(ctx: _Ctx, value: Any, key: str) -> str:
    if not isinstance(value, str) or not value.startswith("zoo:") or len(value) > 200:
        raise ctx.err(key, f"expected a dataset name like 'zoo:digits-test', got {_show(value)}")
    from guard.zoo.registry import DATASETS  # the data set names only: no data is loaded

    bare = value[len("zoo:") :]
    if bare not in DATASETS:
        raise ctx.err(
            key,
            f"unknown dataset {_show(value)}",
            f"Known: {', '.join('zoo:' + d for d in sorted(DATASETS))}.",
        )
    return value


def _parse_options(ctx: _Ctx, raw: Any, key: str) -> dict[str, dict[str, Any]]:
    """``options: {backend: {key: value}}``; the backend validates its own keys at build."""
    block = ctx.mapping(raw, key, _OPTION_BACKENDS)
    out: dict[str, dict[str, Any]] = {}
    for backend, body in block.items():
        if body is not None and not isinstance(body, dict):
            raise ctx.err(
                f"{key}.{backend}",
                f"expected a mapping of option to value, got {_show(body)}",
                "e.g. options: {bundled: {tuning_cache: PATH}}.",
            )
        for k in body or {}:
            if not isinstance(k, str):
                raise ctx.err(f"{key}.{backend}", f"key {_show(k)} is not a string")
        cache = (body or {}).get("tuning_cache")
        if cache is not None and (
            not isinstance(cache, str) or not cache.strip() or "\x00" in cache
        ):
            raise ctx.err(
                f"{key}.{backend}.tuning_cache",
                f"expected a path (relative to the suite file), got {_show(cache)}",
                "e.g. options: {bundled: {tuning_cache: ../.guard/bundled-tuning.json}}.",
            )
        body = dict(body or {})
        # Option values the backends take as strings (or a list of them): a number or a
        # mapping is a typo, said here with the key, not a TypeError at build time.
        for k in ("profile", "pipeline", "graph_optimization_level"):
            if k in body and (not isinstance(body[k], str) or not body[k].strip()):
                raise ctx.err(f"{key}.{backend}.{k}", f"expected a name, got {_show(body[k])}")
        providers = body.get("providers")
        if "providers" in body and (
            not isinstance(providers, list)
            or not providers
            or not all(isinstance(p, str) and p for p in providers)
        ):
            raise ctx.err(
                f"{key}.{backend}.providers",
                f"expected a list of execution provider names, got {_show(providers)}",
                "e.g. providers: [CPUExecutionProvider].",
            )
        out[backend] = body
    return out


def _parse_profile(ctx: _Ctx, value: Any, key: str) -> str | None:
    if value is None:
        return None
    if not isinstance(value, str) or not value.strip() or "\x00" in value:
        raise ctx.err(key, f"expected a delegate profile name or YAML file, got {_show(value)}")
    return value


def _parse_inputs(ctx: _Ctx, raw: Any, key: str) -> dict[str, InputSpec]:
    if raw is None:
        return {}
    if not isinstance(raw, dict):
        raise ctx.err(key, "expected a mapping of input name to {shape, dist, seed, ...}")
    out: dict[str, InputSpec] = {}
    for name, body in raw.items():
        if not isinstance(name, str):
            raise ctx.err(key, f"input name {_show(name)} is not a string")
        ik = f"{key}.{name}"
        body = ctx.mapping(body, ik, _INPUT_KEYS)
        shape = body.get("shape")
        if shape is not None:
            if not isinstance(shape, list):
                raise ctx.err(f"{ik}.shape", f"expected a list of dims, got {_show(shape)}")
            dims = []
            for i, d in enumerate(shape):
                if isinstance(d, bool) or not isinstance(d, int) or d < 0 or d > MAX_INT:
                    raise ctx.err(
                        f"{ik}.shape[{i}]", f"expected a non-negative integer, got {_show(d)}"
                    )
                dims.append(d)
            shape = tuple(dims)
        dist = body.get("dist", "normal")
        if dist not in DISTS:
            raise ctx.err(
                f"{ik}.dist", f"unknown distribution {_show(dist)}", _suggest(str(dist), set(DISTS))
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
                        f"does not apply to dist {_show(dist)}",
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


def _resolve_source(ctx: _Ctx, source: Any, key: str, suite_dir: Path) -> str:
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
            key, f"{_show(source)} is a symlink loop", "Point 'source' at an .onnx file."
        ) from None


def parse_suite(data: Any, path: Path) -> Suite:
    """Validate a parsed YAML document; ``path`` is used for messages and relative sources."""
    ctx = _Ctx(path)
    top = ctx.mapping(data, "", _TOP_KEYS)
    if "schema_version" not in top:
        raise ctx.err("schema_version", "missing", f"Add 'schema_version: {SCHEMA_VERSION}'.")
    version = top["schema_version"]
    if isinstance(version, bool) or not isinstance(version, int) or version != SCHEMA_VERSION:
        raise ctx.err(
            "schema_version",
            f"unsupported version {_show(top['schema_version'])}",
            f"This guard reads schema_version {SCHEMA_VERSION}.",
        )
    name = top.get("suite")
    if not isinstance(name, str) or not _NAME_RE.match(name):
        raise ctx.err(
            "suite", f"expected a name of letters, digits, '_', '-', '.', got {_show(name)}"
        )
    d = ctx.mapping(top.get("defaults"), "defaults", _DEFAULT_KEYS)
    backends = ctx.string_list(d.get("backends", ["onnxruntime"]), "defaults.backends")
    targets = _parse_targets(ctx, d, "defaults", ("host",))
    threads = _threads(ctx, d.get("threads", 1), "defaults.threads")
    build_timeout = _build_timeout(
        ctx, d.get("build_timeout_s", DEFAULT_BUILD_TIMEOUT_S), "defaults.build_timeout_s"
    )
    measure = _parse_measure(ctx, d.get("measure"), "defaults.measure", DEFAULT_MEASURE)
    checks = _parse_checks(ctx, d.get("checks"), "defaults.checks", {})
    profile = _parse_profile(ctx, d.get("profile"), "defaults.profile")
    options = _parse_options(ctx, d.get("options"), "defaults.options")
    description = top.get("description", "")
    if not isinstance(description, str):
        raise ctx.err("description", f"expected a string, got {_show(description)}")

    raw_models = top.get("models")
    if not isinstance(raw_models, list) or not raw_models:
        raise ctx.err("models", "expected a non-empty list of models")
    models: list[ModelEntry] = []
    seen: set[str] = set()
    for i, rm in enumerate(raw_models):
        mk = f"models[{i}]"
        m = ctx.mapping(rm, mk, _MODEL_KEYS)
        mname = m.get("name")
        if not isinstance(mname, str) or not _NAME_RE.match(mname):
            raise ctx.err(f"{mk}.name", f"expected a model name, got {_show(mname)}")
        if mname in seen:
            raise ctx.err(f"{mk}.name", f"duplicate model name {mname!r}")
        seen.add(mname)
        if "source" not in m:
            raise ctx.err(f"{mk}.source", "missing", "Use 'zoo:<name>' or a path to an .onnx file.")
        mtargets = _parse_targets(ctx, m, mk, targets)
        mopts = _parse_options(ctx, m.get("options"), f"{mk}.options")
        merged_opts = {k: dict(v) for k, v in options.items()}
        for k, v in mopts.items():
            merged_opts.setdefault(k, {}).update(v)
        mdesc = m.get("description", "")
        if not isinstance(mdesc, str):
            raise ctx.err(f"{mk}.description", f"expected a string, got {_show(mdesc)}")
        models.extend(
            ModelEntry(
                name=mname,
                source=_resolve_source(ctx, m["source"], f"{mk}.source", path.parent),
                inputs=_parse_inputs(ctx, m.get("inputs"), f"{mk}.inputs"),
                backends=ctx.string_list(m["backends"], f"{mk}.backends")
                if "backends" in m
                else backends,
                target=mt,
                threads=_threads(ctx, m["threads"], f"{mk}.threads") if "threads" in m else threads,
                measure=_parse_measure(ctx, m.get("measure"), f"{mk}.measure", measure),
                checks=_parse_checks(ctx, m.get("checks"), f"{mk}.checks", checks),
                profile=_parse_profile(ctx, m["profile"], f"{mk}.profile")
                if "profile" in m
                else profile,
                options=merged_opts,
                build_timeout_s=_build_timeout(ctx, m["build_timeout_s"], f"{mk}.build_timeout_s")
                if "build_timeout_s" in m
                else build_timeout,
                where=f"{path}: {mk} ({mname})" + (f" [{mt}]" if len(mtargets) > 1 else ""),
                suite_dir=path.parent,
            )
            for mt in mtargets
        )
    return Suite(name=name, path=path, sha256="", models=tuple(models), description=description)


def _parse_targets(
    ctx: _Ctx, block: dict[str, Any], key: str, inherited: tuple[str, ...]
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
                f"expected a non-empty list of target strings, got {_show(values)}",
                'e.g. targets: [host, "llvm -mtriple=aarch64-linux-gnu -mattr=+neon"]',
            )
    else:
        return inherited
    out: list[str] = []
    for i, t in enumerate(values):
        tk = where if where.endswith(".target") else f"{where}[{i}]"
        if not isinstance(t, str) or not t.strip():
            raise ctx.err(tk, f"expected a target string, got {_show(t)}")
        if t.strip() in out:
            raise ctx.err(tk, f"target {_show(t)} is listed twice")
        out.append(t.strip())
    return tuple(out)


def _threads(ctx: _Ctx, value: Any, key: str) -> int:
    n = int(ctx.number(value, key, integer=True, positive=True))
    if n > MAX_THREADS:
        raise ctx.err(
            key,
            f"{n} threads is more than guard allows ({MAX_THREADS})",
            "Give the number of threads the deployment uses, e.g. 1 or 4.",
        )
    return n


def _build_timeout(ctx: _Ctx, value: Any, key: str) -> float:
    return float(ctx.number(value, key, positive=True))


class _BoundedLoader(yaml.SafeLoader):
    """PyYAML's safe loader, refusing documents whose aliases expand past MAX_YAML_NODES."""

    def get_single_node(self):  # type: ignore[no-untyped-def]
        node = super().get_single_node()
        if node is not None:
            _check_expansion(node)
        return node


def _check_expansion(root: yaml.Node) -> None:
    """Count the nodes ``root`` expands to (aliases counted each time), iteratively."""
    weight: dict[int, int] = {}
    on_path: set[int] = set()
    stack: list[tuple[yaml.Node, bool]] = [(root, False)]
    while stack:
        node, done = stack.pop()
        nid = id(node)
        if done:
            on_path.discard(nid)
            kids = _children(node)
            weight[nid] = 1 + sum(weight[id(k)] for k in kids)
            if weight[nid] > MAX_YAML_NODES:
                raise yaml.YAMLError(
                    f"aliases expand to more than {MAX_YAML_NODES} values (an alias bomb?)"
                )
            continue
        if nid in weight:
            continue
        if nid in on_path:
            raise yaml.YAMLError("an alias refers to the value that contains it")
        on_path.add(nid)
        stack.append((node, True))
        stack.extend((k, False) for k in _children(node) if id(k) not in weight)


def _children(node: yaml.Node) -> list[yaml.Node]:
    if isinstance(node, yaml.SequenceNode):
        return list(node.value)
    if isinstance(node, yaml.MappingNode):
        return [x for pair in node.value for x in pair]
    return []


def load_suite(path: str | Path) -> Suite:
    """Read, parse and validate a suite file; every failure is a one-line SuiteError."""
    p = Path(path)
    try:
        raw = read_bounded(p, MAX_SUITE_BYTES)
    except FileNotFoundError:
        raise SuiteError(
            "suite file not found", where=str(p), hint="Pass a path to a suite .yaml (see suites/)."
        ) from None
    except BoundedReadError as exc:
        raise SuiteError(
            exc.reason, where=str(p), hint="Pass a suite .yaml file (see suites/)."
        ) from None
    try:
        text = raw.decode("utf-8")
        data = yaml.load(text, Loader=_BoundedLoader)  # noqa: S506 - a SafeLoader subclass
    except UnicodeDecodeError:
        raise SuiteError("not a UTF-8 text file", where=str(p)) from None
    except RecursionError:
        raise SuiteError("invalid YAML: nested too deeply", where=str(p)) from None
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        loc = f"line {mark.line + 1}, column {mark.column + 1}: " if mark else ""
        problem = getattr(exc, "problem", None) or (str(exc).splitlines() or ["error"])[0]
        problem = problem if len(problem) <= 200 else problem[:197] + "..."
        raise SuiteError(f"{loc}invalid YAML: {problem}", where=str(p)) from None
    try:
        suite = parse_suite(data, p.resolve())
    except RecursionError:
        raise SuiteError("nested too deeply to be a suite", where=str(p)) from None
    # The suite hash pins the file's exact bytes: a changed bound is a changed suite.
    return Suite(
        name=suite.name,
        path=suite.path,
        sha256=hashlib.sha256(raw).hexdigest(),
        models=suite.models,
        description=suite.description,
    )


def latency_bound(value: float | dict[str, float] | None, arch: str) -> float | None:
    """Resolve a per-arch latency bound (``{x86_64: 150, aarch64: 300}``) for ``arch``."""
    if value is None or isinstance(value, float | int):
        return value
    return value.get(arch)
