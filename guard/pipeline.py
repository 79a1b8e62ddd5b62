"""The spine: suite → artefact + manifest → measurement → checks → MLflow → verdict.

``run_suite`` is what ``guard run`` calls. For every (model, backend) of the suite it binds
the model, fetches or creates its golden, builds (or reuses) a content-addressed artefact,
runs it once for numerics, measures it, evaluates the checks and records one result. A
model that cannot be used becomes an ``error`` result and the run goes on: nothing already
measured is lost. The results document is always kept locally before tracking is tried.
"""

from __future__ import annotations

import datetime as _dt
import hashlib
import json
import os
import shutil
import subprocess
import tempfile
import time
import warnings
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from guard import checks as ck
from guard import manifest as mf
from guard.backends import get_backend
from guard.backends.base import Backend, BuildInfo, BuildRequest, Session
from guard.bench import MeasureConfig, measure, preflight, set_threads
from guard.errors import (
    EXIT_BAD_INPUT,
    EXIT_CHECK_FAILED,
    EXIT_INTERNAL,
    EXIT_OK,
    GuardError,
    ModelError,
    UsageError,
)
from guard.fsutil import atomic_write_text, file_sha256
from guard.golden import Golden, GoldenStore, compare_outputs, top1_accuracy
from guard.model import ModelSpec, bind, load_model, make_inputs
from guard.suite import ModelEntry, Suite, load_suite

GUARD_DIR = ".guard"
RESULTS_SCHEMA_VERSION = 1


@dataclass
class RunOptions:
    workdir: Path = field(default_factory=Path.cwd)
    json_path: Path | None = None
    junit_path: Path | None = None
    markdown_path: Path | None = None
    html_path: Path | None = None
    tracking_uri: str | None = None
    track: bool = True
    golden_root: Path | None = None  # default: <suite dir>/goldens/<suite>
    clock: Callable[[], float] = time.perf_counter
    console: Any = None  # rich Console, or None for the default
    models: tuple[str, ...] = ()  # run only these models (all when empty)
    backends: tuple[str, ...] = ()  # run only these backends (all when empty)
    baseline: dict[str, Any] | None = None  # a results document to judge regress_pct against


def golden_store(suite: Suite, root: Path | None = None) -> GoldenStore:
    return GoldenStore(root if root is not None else suite.directory / "goldens" / suite.name)


# ---------------------------------------------------------------------------- models


def resolve_model(entry: ModelEntry, cache_dir: Path | None = None) -> Path:
    if entry.source.startswith("zoo:"):
        from guard import zoo

        try:
            return zoo.model_path(entry.source[4:], cache_dir)
        except GuardError as exc:
            raise ModelError(str(exc), where=f"{entry.where}.source") from None
    return Path(entry.source)


def prepare_model(entry: ModelEntry) -> tuple[ModelSpec, Path]:
    path = resolve_model(entry)
    model = load_model(path)
    return bind(model, path, dict(entry.inputs), entry.where), path


def reference_outputs(path: Path, feeds: dict[str, np.ndarray]) -> tuple[list[np.ndarray],
                                                                      dict[str, Any]]:
    """The golden producer: onnxruntime with every graph optimisation off."""
    import onnxruntime

    from guard.backends.onnxruntime import reference_session

    sess = reference_session(path)
    outs = sess.run(None, feeds)
    producer = {"name": "onnxruntime", "version": onnxruntime.__version__,
                "graph_optimization_level": "disabled", "threads": 1,
                "providers": sess.get_providers()}
    return [np.asarray(o) for o in outs], producer


def ensure_golden(store: GoldenStore, entry: ModelEntry, spec: ModelSpec, path: Path,
                  *, update_reason: str | None = None) -> tuple[Golden, str]:
    """Load the model's golden, or create it (status "created"), or update it with a reason."""
    existing = store.load(entry.name)
    if existing is not None and update_reason is None:
        for name, shape in spec.shapes.items():
            got = existing.inputs.get(name)
            if got is None or tuple(got.shape) != tuple(shape):
                raise ModelError(
                    f"golden inputs do not match the model's bound inputs ({name}: golden "
                    f"{None if got is None else list(got.shape)}, suite {list(shape)})",
                    where=entry.where,
                    hint=f"Run: guard golden update <suite> --model {entry.name} --reason '...'.")
        return existing, "compared"
    feeds = make_inputs(spec, dict(entry.inputs))
    outs, producer = reference_outputs(path, feeds)
    named = dict(zip(spec.outputs, outs, strict=True))
    golden = store.save(entry.name, feeds, named, producer=producer, model_sha256=spec.sha256,
                        reason=update_reason, previous=existing)
    return golden, ("updated" if existing is not None else "created")


# ---------------------------------------------------------------------------- artefacts


def tuning_cache_pin(path: str, entry: ModelEntry) -> dict[str, Any]:
    """{path, sha256} of a tuning cache (a file, or a directory of files), before the build.

    Relative paths are relative to the suite file. Hits and misses come from the backend.
    """
    p = Path(path)
    if not p.is_absolute():
        p = entry.suite_dir / p
    p = p.resolve()
    if not p.exists():
        raise UsageError(f"options.tuning_cache: {p} does not exist", where=entry.where,
                         hint="Point it at a tuning database (run the nightly tuning job), or "
                              "remove the option to build untuned.")
    h = hashlib.sha256()
    files = sorted(f for f in p.rglob("*") if f.is_file()) if p.is_dir() else [p]
    for f in files:
        h.update(str(f.relative_to(p) if p.is_dir() else f.name).encode() + b"\0")
        h.update(f.read_bytes())
    return {"path": str(p), "sha256": h.hexdigest(), "entries": None, "hits": None,
            "misses": None}


def _atomic_json(path: Path, doc: dict[str, Any]) -> None:
    atomic_write_text(path, json.dumps(doc, indent=2, sort_keys=True, default=str) + "\n")


def build_artefact(backend: Backend, entry: ModelEntry, spec: ModelSpec, backend_name: str,
                   workdir: Path) -> tuple[Path, dict[str, Any], BuildInfo, bool]:
    """Build (or reuse) the content-addressed artefact for one model and backend.

    The artefact directory is keyed by the manifest's pinned hash plus the backend
    options: if nothing pinned changed, the previous build is reused. A build happens in a
    private temporary directory renamed into place, so a failed or killed build leaves no
    half artefact behind.
    """
    compiler, runtime = backend.versions()
    options = dict(entry.options.get(backend_name, {}))
    key_only: dict[str, str] = {}  # keys the artefact, not passed to the backend
    if backend_name == "bundled" and entry.profile and "profile" not in options:
        options["profile"] = entry.profile
    profile = options.get("profile")
    if isinstance(profile, str) and (profile.endswith((".yaml", ".yml")) or "/" in profile):
        pp = Path(profile) if Path(profile).is_absolute() else entry.suite_dir / profile
        if not pp.is_file():
            raise UsageError(f"profile {profile!r}: no such file ({pp})", where=entry.where,
                             hint="Name a shipped profile (guard partition --help) or a YAML "
                                  "file relative to the suite.")
        options["profile"] = str(pp.resolve())
        key_only["profile_sha256"] = file_sha256(pp)
    cache_path = options.pop("tuning_cache", None)
    cache_pin = tuning_cache_pin(cache_path, entry) if cache_path else None
    manifest = mf.build_manifest(
        compiler=compiler, runtime=runtime, target_raw=entry.target, threads=entry.threads,
        model_path=spec.path, model_opset=spec.opset, model_inputs=spec.inputs_manifest(),
        tuning_cache=cache_pin, model_sha256=spec.sha256)
    if cache_pin is not None:
        # The cache's content hash is part of the key: a changed cache is a new artefact.
        key_only["tuning_cache_sha256"] = cache_pin["sha256"]
    key = mf.artefact_key(manifest, {**options, **key_only})
    final = mf.artefact_dir(workdir / GUARD_DIR / "artefacts", entry.name, backend_name, key)
    build_json = final / "build.json"
    if (final / "manifest.json").is_file() and build_json.is_file():
        try:
            cached = mf.load_manifest(final / "manifest.json")
            info = BuildInfo(**json.loads(build_json.read_text()))
            if (final / info.payload).exists():
                return final, cached, info, True
        except (GuardError, OSError, TypeError, json.JSONDecodeError):
            pass  # a damaged cache entry is rebuilt, not trusted
    final.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{final.name}.", dir=final.parent))
    try:
        req = BuildRequest(model_path=spec.path, input_shapes=dict(spec.shapes),
                           target_raw=entry.target,
                           target_canonical=manifest["target"]["canonical"],
                           threads=entry.threads, out_dir=tmp,
                           tuning_cache=Path(cache_pin["path"]) if cache_pin else None,
                           options=options)
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            info = backend.build(req)
        info.warnings = list(dict.fromkeys([*info.warnings, *(str(w.message) for w in caught)]))
        # The backend may pin more than its versions (pipeline name, optimisation level).
        manifest = mf.build_manifest(
            compiler=info.compiler, runtime=info.runtime, target_raw=entry.target,
            threads=entry.threads, model_path=spec.path, model_opset=spec.opset,
            model_inputs=spec.inputs_manifest(), model_sha256=spec.sha256,
            tuning_cache={**(cache_pin or {}), **info.tuning} if (info.tuning or cache_pin)
            else None)
        mf.write_manifest(tmp / "manifest.json", manifest)
        _atomic_json(tmp / "build.json",
                     {"payload": info.payload, "compiler": info.compiler,
                      "runtime": info.runtime, "session_options": info.session_options,
                      "tuning": info.tuning, "graph": info.graph, "warnings": info.warnings})
        if final.exists():
            shutil.rmtree(final)
        os.replace(tmp, final)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    return final, manifest, info, False


# ---------------------------------------------------------------------------- cases


@dataclass
class Case:
    """One built, loaded (model, backend, target) ready to run: what ab/calibrate time."""

    model: str
    backend: str
    target: str
    entry: ModelEntry
    spec: ModelSpec
    artefact: Path
    manifest: dict[str, Any]
    build: BuildInfo
    reused: bool
    session: Session
    feeds: dict[str, np.ndarray]

    def run_once(self) -> None:
        self.session.run(self.feeds)


def prepare_cases(suite_path: Path, workdir: Path | None = None) -> list[Case]:
    """Build and load every (model, backend) of a suite, with the golden's inputs as feeds."""
    suite = load_suite(suite_path)
    workdir = Path(workdir or Path.cwd())
    store = golden_store(suite)
    out = []
    for entry in suite.models:
        spec, path = prepare_model(entry)
        golden, _ = ensure_golden(store, entry, spec, path)
        out += [load_case(entry, spec, golden, b, workdir) for b in entry.backends]
    return out


def load_case(entry: ModelEntry, spec: ModelSpec, golden: Golden, backend_name: str,
              workdir: Path) -> Case:
    """Build (or reuse) the artefact and load it, fed with the golden's inputs."""
    backend = get_backend(backend_name)
    art, manifest, info, reused = build_artefact(backend, entry, spec, backend_name, workdir)
    return Case(entry.name, backend_name, entry.target, entry, spec, art, manifest, info,
                reused, backend.load(art, entry.threads), dict(golden.inputs))


# ---------------------------------------------------------------------------- one result


def _accuracy(entry: ModelEntry, session: Session, spec: ModelSpec) -> tuple[float, int]:
    from guard import zoo

    cfg = entry.checks["accuracy"]
    try:
        x, y = zoo.load_dataset(cfg["dataset"])
    except GuardError as exc:
        raise ModelError(str(exc), where=f"{entry.where}.checks.accuracy.dataset") from None
    limit = cfg.get("limit")
    if limit:
        x, y = x[:limit], y[:limit]
    name = spec.inputs[0].name
    batch = spec.shapes[name][0] if spec.shapes[name] else 1
    if tuple(x.shape[1:]) != tuple(spec.shapes[name][1:]):
        raise ModelError(f"dataset {cfg['dataset']} samples have shape {list(x.shape[1:])}, "
                         f"input {name!r} wants {list(spec.shapes[name][1:])}",
                         where=f"{entry.where}.checks.accuracy")
    dtype = spec.inputs[0].dtype
    preds = []
    n = len(x) - len(x) % batch  # whole batches only: the artefact's shapes are static
    for i in range(0, n, batch):
        out = session.run({name: np.ascontiguousarray(x[i:i + batch], dtype=dtype)})
        preds.append(np.asarray(out[0]).reshape(batch, -1))
    logits = np.concatenate(preds) if preds else np.zeros((0, 1))
    return top1_accuracy(logits, y[:n]), n


def _host_arch(manifest: dict[str, Any]) -> str:
    try:
        return mf.target_arch(manifest["target"]["canonical"])
    except Exception:  # noqa: BLE001 - fall back to the host's arch
        return os.uname().machine


def run_case(entry: ModelEntry, spec: ModelSpec, golden: Golden, golden_status: str,
             backend_name: str, opts: RunOptions) -> dict[str, Any]:
    case = load_case(entry, spec, golden, backend_name, opts.workdir)
    art, manifest, info, reused = case.artefact, case.manifest, case.build, case.reused
    session, feeds = case.session, case.feeds
    got = session.run(feeds)
    tol = ck.tolerance_bounds(entry.checks.get("tolerance", {}))
    numerics = compare_outputs([np.asarray(g) for g in got], golden.output_list, **tol)
    numerics["golden_status"] = golden_status
    if golden.meta.get("model_sha256") not in (None, spec.sha256):
        numerics["golden_model_changed"] = True
    checks: list[ck.Check] = []
    if "accuracy" in entry.checks:
        try:
            acc, n = _accuracy(entry, session, spec)
            numerics["accuracy"] = acc
            checks.append(ck.accuracy_check(entry.checks["accuracy"], acc, n))
        except GuardError as exc:
            checks.append(ck.accuracy_check(entry.checks["accuracy"], None, None, str(exc)))

    cfg = MeasureConfig.from_dict(entry.measure, where=f"{entry.where}.measure")
    pre = preflight(entry.threads)
    timings = measure(lambda: session.run(feeds), cfg, opts.clock)
    post = preflight(entry.threads, contention=timings.contention)
    stats = timings.stats()
    partitions = session.partitions()
    memory = session.memory()
    arch = _host_arch(manifest)

    if "latency" in entry.checks:
        checks += ck.latency_checks(entry.checks["latency"], stats, arch, timings.truncated)
        if "regress_pct" in entry.checks["latency"]:
            checks.append(_regress(entry, backend_name, manifest, timings.samples_s, opts))
    checks.insert(0, ck.tolerance_check(tol, numerics))
    if "partitions" in entry.checks:
        checks.append(ck.partitions_check(entry.checks["partitions"], partitions.to_dict()))
    if "arena" in entry.checks:
        checks.append(ck.arena_check(entry.checks["arena"], memory.arena_bytes,
                                     memory.lower_bound_bytes))
    if "tuning" in entry.checks:
        checks.append(ck.tuning_check(entry.checks["tuning"], manifest.get("tuning_cache", {}),
                                      backend_name))
    # The facts after the loop (with its contention) decide the warnings; the ones from
    # before are kept as facts, not repeated as warnings.
    post["warnings"] = list(dict.fromkeys([*post.get("warnings", []), *timings.warnings,
                                           *(f"build: {w}" for w in info.warnings)]))
    post["before"] = {k: pre.get(k) for k in ("loadavg", "warnings")}
    result = {
        "model": entry.name, "backend": backend_name, "target": entry.target,
        "verdict": ck.verdict(checks),
        "checks": [c.to_dict() for c in checks],
        "manifest": manifest,
        "latency_ms": stats,
        "samples_ms": [s * 1e3 for s in timings.samples_s],
        "measurement": {"warmup_iters": timings.warmup_iters, "truncated": timings.truncated,
                        "stopped_by": timings.stopped_by, "contention": timings.contention,
                        "config": dict(entry.measure)},
        "partitions": partitions.to_dict(),
        "arena_bytes": memory.arena_bytes,
        "arena_lower_bound_bytes": memory.lower_bound_bytes,
        "memory": {"how": memory.how, **memory.extra},
        "numerics": numerics,
        "preflight": post,
        "artefact": str(art),
        "artefact_reused": reused,
        "error": None,
    }
    if info.graph is not None:
        result["graph"] = info.graph
    return result


def _regress(entry: ModelEntry, backend: str, manifest: dict[str, Any],
             samples_s: list[float], opts: RunOptions) -> ck.Check:
    """latency.regress against the --baseline results file, when one is given."""
    from guard.bench.regress import RegressConfig, compare_unpaired
    from guard.compare.compare import host_incompatibility, row_key

    bound = float(entry.checks["latency"]["regress_pct"])
    if opts.baseline is None:
        return ck.regress_check(bound, None)
    key = (entry.name, backend, manifest["target"]["canonical"])
    base = next((r for r in opts.baseline.get("results", [])
                 if r.get("verdict") != "error" and r.get("manifest")
                 and row_key(r) == key), None)
    if base is None:
        return ck.regress_check(bound, None, f"the baseline has no result for {key[0]} "
                                             f"[{key[1]}] on this target")
    why = host_incompatibility(base["manifest"], manifest)
    if why:
        return ck.regress_check(bound, None, f"baseline refused: {why}")
    comp = compare_unpaired(base.get("samples_ms") or [], [s * 1e3 for s in samples_s],
                            RegressConfig(regress_pct=bound))
    return ck.regress_check(bound, comp.to_dict())


def error_result(entry: ModelEntry, backend: str, exc: BaseException) -> dict[str, Any]:
    msg = str(exc) if isinstance(exc, GuardError) else f"internal error: {exc!r}"
    return {"model": entry.name, "backend": backend, "target": entry.target,
            "verdict": "error", "error": msg,
            "error_kind": "usage" if isinstance(exc, UsageError) else "internal",
            "checks": [{"name": "run", "status": "error", "value": None, "bound": None,
                        "message": msg}],
            "manifest": None, "latency_ms": None, "samples_ms": [], "partitions": None,
            "arena_bytes": None, "arena_lower_bound_bytes": None, "numerics": None,
            "artefact": None}


# ---------------------------------------------------------------------------- the run


def git_info(cwd: Path) -> dict[str, Any]:
    def git(*args: str) -> str | None:
        try:
            out = subprocess.run(["git", *args], cwd=cwd, capture_output=True, text=True,
                                 timeout=10)
        except (OSError, subprocess.SubprocessError):
            return None
        return out.stdout.strip() if out.returncode == 0 else None

    commit = git("rev-parse", "HEAD")
    if commit is None:
        return {"commit": None, "dirty": None, "branch": None}
    status = git("status", "--porcelain", "--untracked-files=no")
    branch = os.environ.get("GITHUB_HEAD_REF") or os.environ.get("GITHUB_REF_NAME") \
        or git("rev-parse", "--abbrev-ref", "HEAD")
    return {"commit": commit, "dirty": bool(status), "branch": branch}


def exit_code_for(results: list[dict[str, Any]]) -> int:
    code = EXIT_OK
    for r in results:
        if r["verdict"] == "error":
            code = max(code, EXIT_BAD_INPUT if r.get("error_kind") == "usage" else EXIT_INTERNAL)
        elif r["verdict"] == "fail":
            code = max(code, EXIT_CHECK_FAILED)
    return code


def _selected(suite: Suite, opts: RunOptions) -> list[tuple[ModelEntry, tuple[str, ...]]]:
    names = {m.name for m in suite.models}
    for m in opts.models:
        if m not in names:
            raise UsageError(f"--model {m!r}: no such model in suite {suite.name}",
                             hint=f"Models: {', '.join(sorted(names))}.")
    out = []
    for entry in suite.models:
        if opts.models and entry.name not in opts.models:
            continue
        backends = tuple(b for b in entry.backends if not opts.backends or b in opts.backends)
        if backends:
            out.append((entry, backends))
    if not out:
        raise UsageError(f"nothing to run: --backend {', '.join(opts.backends)} matches no "
                         f"backend of the selected models in suite {suite.name}",
                         hint="Check the suite's backends lists.")
    return out


def _say(message: str, console: Any = None) -> None:
    """One line to stderr (or the given rich console): warnings the user must see."""
    if console is not None:
        console.print(message, markup=False, highlight=False)
    else:
        import sys

        print(message, file=sys.stderr)


def run_suite(suite_path: Path, opts: RunOptions | None = None) -> tuple[dict[str, Any], int]:
    """Run a whole suite; returns the results document and the exit code.

    Raises GuardError only for problems with the suite itself (exit 2) or the output
    paths; per-model problems become ``error`` results.
    """
    from guard import report, track

    opts = opts or RunOptions()
    suite = load_suite(suite_path)
    work = _selected(suite, opts)
    for p in (opts.json_path, opts.junit_path, opts.markdown_path, opts.html_path):
        if p is not None and not Path(p).resolve().parent.is_dir():
            raise UsageError(f"output directory {Path(p).resolve().parent} does not exist",
                             where=str(p), hint="Create it or choose another path.")
    uri = track.resolve_uri(opts.tracking_uri, opts.workdir) if opts.track else None
    tracking_problem: str | None = None
    if uri is not None:
        try:
            track.check_reachable(uri)
        except GuardError as exc:
            tracking_problem = str(exc)
            _say(f"warning: {exc} (measuring anyway; results will be kept "
                                "locally)", opts.console)

    started = _dt.datetime.now(_dt.UTC).isoformat(timespec="seconds")
    store = golden_store(suite, opts.golden_root)
    results: list[dict[str, Any]] = []
    total = sum(len(b) for _, b in work)
    with report.progress(total, opts.console) as bar:
        for entry, backends in work:
            set_threads(entry.threads)
            try:
                spec, path = prepare_model(entry)
                golden, gstatus = ensure_golden(store, entry, spec, path)
            except Exception as exc:  # noqa: BLE001 - becomes an error result, run goes on
                for b in backends:
                    results.append(error_result(entry, b, exc))
                    bar.advance()
                continue
            for b in backends:
                bar.step(f"{entry.name} [{b}]")
                try:
                    results.append(run_case(entry, spec, golden, gstatus, b, opts))
                except Exception as exc:  # noqa: BLE001
                    results.append(error_result(entry, b, exc))
                bar.advance()

    doc: dict[str, Any] = {
        "schema_version": RESULTS_SCHEMA_VERSION,
        "suite": suite.name,
        "suite_path": str(suite.path),
        "suite_sha256": suite.sha256,
        "started": started,
        "finished": _dt.datetime.now(_dt.UTC).isoformat(timespec="seconds"),
        "git": git_info(suite.directory),
        "results": results,
    }
    code = exit_code_for(results)
    for r in results:
        if r["verdict"] == "error":
            _say(f"guard: error: {r['model']} [{r['backend']}]: {r['error']}", opts.console)

    if uri is not None:
        if tracking_problem is None:
            try:
                receipt = track.log_results(doc, uri)
                doc["tracking"] = {"uri": uri, **{k: v for k, v in receipt.items()
                                                  if k != "uri"}}
            except Exception as exc:  # noqa: BLE001 - never lose results to a tracking fault
                tracking_problem = str(exc)
        if tracking_problem is not None:
            kept = track.keep_results(doc, opts.workdir)
            _say(track.unreachable_message(uri, kept), opts.console)
            doc["tracking"] = {"uri": uri, "error": tracking_problem, "kept": str(kept)}
            # Results are safe, but the run did not do what was asked: exit 2.
            code = max(code, EXIT_BAD_INPUT)
    doc["exit_code"] = code

    if opts.json_path:
        report.write_json(doc, Path(opts.json_path))
    if opts.junit_path:
        report.write_junit(doc, Path(opts.junit_path))
    if opts.markdown_path:
        report.write_markdown(doc, Path(opts.markdown_path))
    if opts.html_path:
        report.write_html(doc, Path(opts.html_path))
    report.render_console(doc, opts.console)
    return doc, code
