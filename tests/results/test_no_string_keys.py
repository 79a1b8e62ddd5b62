"""No reader outside guard.results reads a result by a string key: it reads attributes of
the typed tree (guard.results), so a renamed field fails mypy instead of a reader two
packages away.

The rule, checked on the source (parsed, never imported) of every package in MIGRATED: no
subscript read ``x["key"]`` and no ``x.get("key")`` / ``x.pop("key")`` whose key is a field
of a results-tree record (the JSON keys of a result, its parts, the manifest, the counted
block, the two documents and a comparison's cross-architecture rows). Writers still build the JSON: stores and ``setdefault`` are
theirs. A package joins MIGRATED when its
readers are moved to attributes; ALLOWED lists the few string reads of those keys that
are not reads of a result (another document that shares a word), each with why. Every other
part of guard is in NOT_READERS, saying why it reads no result, so a new package is in one
list or the other.
"""

from __future__ import annotations

import ast
import dataclasses
from pathlib import Path

from guard.results import counted, cross_arch, documents, manifest, result
from guard.results.record import Record

ROOT = Path(__file__).resolve().parents[2]

# Packages (or modules) whose readers read results through the typed tree.
MIGRATED = (
    "guard/report",
    "guard/track",
    "guard/stats",
    "guard/counting",
    "guard/compare",
    # the run: its readers read records; its writers build the JSON (the reads of what a
    # writer just built are allowed below, each as what it is)
    "guard/run",
    "guard/measure",
    "guard/emulate",
    "guard/cli",
    "guard/doctor",
    "guard/prepare/calibrate.py",
    "guard/experiment",
    "guard/checks",
    "guard/golden",
    "guard/reduce",
)

# (file, key) -> why the string read is not a read of a result.
ALLOWED: dict[tuple[str, str], str] = {
    ("guard/report/dashboard.py", "status"): "an MLflow run's status, from its runs table",
    ("guard/report/dashboard_series.py", "index"): "a change point of the p50 series (analyse)",
    ("guard/report/dashboard_charts.py", "index"): "a dashboard step's point index",
    ("guard/track/index.py", "duration_s"): "an MLflow run's metrics",
    ("guard/track/records.py", "arena_bytes"): "the metrics being built, not the result",
    ("guard/track/records.py", "arena_lower_bound_bytes"): "the metrics being built",
    ("guard/stats/calibrate.py", "entries"): "the calibrated noise file, not a result",
    ("guard/stats/calibrate.py", "schema_version"): "the calibrated noise file's version",
    ("guard/stats/calibrate.py", "run_noise_pct"): "a calibrated noise file's entry",
    ("guard/stats/calibrate.py", "noise_pct"): "a calibrated noise file's entry",
    **{("guard/counting/child.py", k): "the counting child's request, not a result"
       for k in ("artefact", "backend", "model", "inputs", "warmup", "inferences")},
    **{("guard/counting/count.py", k): "the suite's measure.counted block and the engine's "
       "own fingerprint, read while the counted block is written"
       for k in ("engine", "inferences", "warmup")},
    **{("guard/counting/rows.py", k): "a counted comparison row (compare_counted's output)"
       for k in ("verdict",)},
    **{("guard/compare/compare.py", k): "the comparison rows compare_docs just built"
       for k in ("manifest_diff", "verdict", "ratio", "stats", "method", "outputs")},
    **{("guard/compare/crossarch.py", k): "the row crossarch is building (its drift and sides) "
       "and the encoded outputs it decodes"
       for k in ("tensors", "allclose", "arch", "name")},
    **{("guard/compare/crossarch.py", k): "a tolerance check's bound {rtol, atol}"
       for k in ("rtol", "atol")},
    **{("guard/checks/evaluate.py", k): "a tolerance check's bound {rtol, atol} being written"
       for k in ("rtol", "atol")},
    ("guard/compare/attribution.py", "op"): "an unsupported-op item ({op_type|op})",
    **{("guard/experiment/ab.py", k): "the A/B rows ab_row just built"
       for k in ("manifest_diff", "verdict", "ratio")},
    ("guard/experiment/ab_ref.py", "name"): "a pyproject's project name",
    **{("guard/experiment/ab_ref.py", k): "a worker's reply (the ab_worker protocol)"
       for k in ("error", "ms", "cases")},
    ("guard/experiment/ab_ref.py", "summary"): "the comparison ab_document just built",
    ("guard/experiment/ab_worker.py", "regress_pct"): "a side's suite checks.latency (a mapping "
    "in a tree from before the check blocks were typed)",
    ("guard/experiment/ab_worker.py", "latency"): "a side's suite checks block (a mapping in a "
    "tree from before the check blocks were typed)",
    ("guard/experiment/ab_worker.py", "op"): "a request of the ab_worker protocol",
    **{("guard/experiment/bump.py", k): "the runs of each side, by side"
       for k in ("base", "head")},
    ("guard/experiment/bump.py", "manifest_diff"): "the comparison compare_docs just built",
    **{("guard/compare/history.py", k): "history's own analysis and series"
       for k in ("message", "first", "last", "regress_pct", "pct", "bound", "backend", "target",
                 "arch")},
    ("guard/run/counted.py", "counted"): "the suite entry's measure block (measure.counted)",
    ("guard/run/one_result.py", "warnings"): "the preflight block being written",
    ("guard/cli/ab.py", "summary"): "the comparison being written (its counted rows added)",
    ("guard/cli/ab.py", "counted"): "the counted rows just added to the comparison",
    **{("guard/cli/calibrate.py", k): "the noise file's entries (guard calibrate's own output)"
       for k in ("entries", "noise_pct", "rounds", "run_noise_pct")},
    **{("guard/cli/dashboard.py", k): "the dashboard's counts (write_dashboard's summary)"
       for k in ("results", "suite")},
    ("guard/cli/fit.py", "fits"): "guard fit's report (guard.compiler.fit)",
    ("guard/cli/tune.py", "seconds"): "the tuner's summary (guard.compiler.tuning)",
    **{("guard/measure/round_worker.py", k): "a round worker's request (RoundJob, as sent)"
       for k in ("artefact", "backend", "config", "manifest", "threads")},
    **{("guard/measure/timer.py", k): "the statistics summarize computes (a round's record "
       "being written)" for k in ("n", "p50")},
    ("guard/run/facts.py", "budget"): "a backend's memory report (MemoryInfo.extra)",
    **{("guard/run/facts.py", k): "the calibrated noise file's entry (guard calibrate)"
       for k in ("noise_pct", "run_noise_pct")},
    ("guard/run/base_compare.py", "error"): "what tracking did (guard.run.deliver's receipt)",
    **{("guard/run/build.py", k): "the manifest and tuning-cache pin build_artefact just built, "
       "and the backend's options" for k in ("tuning_cache", "sha256", "target", "canonical",
                                             "path")},
    **{("guard/run/cache_check.py", k): "an artefact's hashes.json" for k in ("schema_version",
                                                                             "files")},
    **{("guard/run/deliver.py", k): "the results document being delivered (written)"
       for k in ("results", "tracking")},
    **{("guard/run/int8.py", k): "an int8 model's quantization pins (its metadata)"
       for k in ("source_sha256", "profile_sha256", "calibration_sha256", "method")},
    ("guard/run/stream.py", "suite"): "the head of the results document being written",
    **{("guard/report/dashboard.py", k): "a dashboard's series and steps"
       for k in ("notes", "pct", "s")},
    ("guard/report/dashboard_charts.py", "pct"): "a dashboard step",
    **{("guard/report/dashboard_int8.py", k): "the int8 table's own rows (sorting)"
       for k in ("model", "backend", "target", "arch")},
    **{("guard/doctor/render.py", k): "the doctor's own document (cases, findings)"
       for k in ("backend", "base", "cases", "head", "model", "status", "suite", "summary",
                 "target")},
    ("guard/doctor/doctor.py", "cases"): "the doctor's own document",
    **{("guard/doctor/facts.py", k): "the artefact's partitions.json and a split record "
       "{node, op, backend, declined} read into a Split"
       for k in ("splits", "node", "op", "backend")},
    **{("guard/doctor/steps_host.py", k): "a cache the host recorded (manifest.host.caches: "
       "older records' list), read into a HostCache" for k in ("bytes", "name")},
    **{("guard/doctor/steps_kernels.py", k): "a kernel time (KernelTime)"
       for k in ("label", "ms", "name", "share")},
    ("guard/doctor/steps_options.py", "session_options"): "the artefact's build.json/ort.json",
    ("guard/golden/produce.py", "golden_stale"): "the numerics block the run is writing",
    **{("guard/golden/store.py", k): "golden.json as loaded, checked while its arrays are read"
       for k in ("inputs", "outputs", "sha256")},
    ("guard/reduce/bundle.py", "tuning_cache"): "a backend's options block (a path to resolve)",
    ("guard/reduce/bundle.py", "name"): "the reproducer suite's entry being written",
    **{("guard/reduce/oracle.py", k): "the numerics compare_outputs just computed and the "
       "tolerance bounds" for k in ("allclose", "max_abs_err", "max_rel_err", "rtol", "atol")},
    **{("guard/reduce/oracle.py", k): "the artefact's partitions.json and its split records"
       for k in ("splits", "op", "node")},
    **{("guard/reduce/reduce.py", k): "the reduction's own summary (ReduceSummary)"
       for k in ("model", "backend", "nodes_before", "nodes_after", "op")},
    **{("guard/reduce/summary.py", k): "the reduction's own summary (ReduceSummary) and an "
       "oracle's observation (ObservationDetail)"
       for k in ("ratio", "max_abs_err", "max_rel_err", "verdict", "threshold_pct", "backend",
                 "model", "nodes_before", "nodes_after", "seconds", "source", "ops_before",
                 "ops_after", "rtol", "atol", "ci", "partitions", "op", "node", "inputs",
                 "outputs")},
}  # fmt: skip


def result_keys() -> frozenset[str]:
    """Every JSON key a results-tree record reads as a field."""
    keys: set[str] = set()
    for module in (result, manifest, counted, documents, cross_arch):
        for obj in vars(module).values():
            if isinstance(obj, type) and issubclass(obj, Record) and obj is not Record:
                keys.update(f.name for f in dataclasses.fields(obj) if f.name != "extra")
    return frozenset(keys)


def string_reads(path: Path, keys: frozenset[str]) -> list[tuple[int, str]]:
    """(line, key) of each string-keyed read of one of ``keys`` in ``path``."""
    tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
    out = []
    for node in ast.walk(tree):
        key = None
        if (
            isinstance(node, ast.Subscript)
            and isinstance(node.ctx, ast.Load)
            and isinstance(node.slice, ast.Constant)
        ):
            key = node.slice.value
        elif (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Attribute)
            and node.func.attr in ("get", "pop")
            and node.args
            and isinstance(node.args[0], ast.Constant)
        ):
            key = node.args[0].value
        if isinstance(key, str) and key in keys:
            out.append((node.lineno, key))
    return out


def test_migrated_packages_read_results_by_attribute():
    keys = result_keys()
    found = []
    used = set()
    for pkg in MIGRATED:
        root = ROOT / pkg
        for path in sorted(root.rglob("*.py")) if root.is_dir() else [root]:
            rel = str(path.relative_to(ROOT))
            for line, key in string_reads(path, keys):
                if (rel, key) in ALLOWED:
                    used.add((rel, key))
                    continue
                found.append(f"{rel}:{line}: [{key!r}]")
    assert not found, (
        "a result read by a string key (read the guard.results record's attribute; a field "
        "it lacks is added there, guard/results/record.py says how):\n  " + "\n  ".join(found)
    )
    assert used == set(ALLOWED), f"stale ALLOWED entries: {sorted(set(ALLOWED) - used)}"


# Packages that read no result: the rule has nothing to check there, and a package that is
# in neither list fails below, so a new package (or one that starts reading results) says
# which it is. Their string reads are of their own documents, named here.
NOT_READERS: dict[str, str] = {
    "guard/backends": "builds artefacts and times sessions: its partition, memory and kernel "
    "reports are what a result is written from (BuildInfo, PartitionInfo), never a result",
    "guard/manifest": "builds manifests (manifest/written.py) and diffs or hashes any guard "
    "version's manifest key by key as free-form JSON, every key alike",
    "guard/suite": "reads suite files (its blocks share words such as target and key)",
    "guard/quantize": "writes int8 models and reads its own profile file",
    "guard/prepare/__init__.py": "the package's docstring",
    "guard/prepare/init.py": "reads the numerics compare_outputs just computed for a golden",
    "guard/prepare/tune.py": "reads a suite entry's backend options and the tuner's summary",
    "guard/core": "validates documents as parsed (schema.py), before any record reads them",
    "guard/compiler": "the compiler's IR attributes and its own artefact files",
    "guard/zoo": "builds models",
    "guard/suites": "suite files shipped with guard (no Python)",
}


def test_every_package_is_a_migrated_reader_or_reads_no_result():
    covered = set(MIGRATED) | set(NOT_READERS)
    missing = []
    for path in sorted((ROOT / "guard").iterdir()):
        if path.name.startswith("__") or path.name == "results" or path.suffix in (".typed",):
            continue
        rel = f"guard/{path.name}"
        if path.is_dir() and not (path / "__init__.py").exists():
            if rel not in covered:
                missing.append(rel)
            continue
        parts = (
            sorted(str(p.relative_to(ROOT)) for p in path.rglob("*.py")) if path.is_dir() else [rel]
        )
        for part in parts:
            if not any(part == c or part.startswith(c + "/") for c in covered):
                missing.append(part)
    assert not missing, (
        "neither in MIGRATED (reads results by attribute) nor in NOT_READERS (reads no "
        "result, with why): " + ", ".join(missing)
    )
    stale = [c for c in covered if not (ROOT / c).exists()]
    assert not stale, f"MIGRATED/NOT_READERS name paths that do not exist: {stale}"


def test_the_rule_sees_subscripts_and_gets(tmp_path: Path):
    src = tmp_path / "m.py"
    src.write_text(
        "def f(r, env):\n"
        "    a = r['latency_ms']['p50']\n"
        "    b = r.get('manifest')\n"
        "    c = env.get('CI')\n"
        "    return r.latency_ms.p50, a, b, c\n"
    )
    assert sorted(string_reads(src, result_keys())) == [
        (2, "latency_ms"),
        (2, "p50"),
        (3, "manifest"),
    ]
