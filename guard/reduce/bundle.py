"""The reproducer bundle: reduced model, its inputs, a one-model suite, its golden, a README.

Layout (``OUT/``)::

    model.onnx          the reduced model
    inputs.npz          its inputs (the full model's intermediate tensors at the cut)
    suite.yaml          one model, the original entry's backend/target/threads/options
    base.yaml           (latency) the base variant, for `guard ab suite.yaml --base base.yaml`
    goldens/<suite>/    the golden: these inputs, the reference's outputs on the cut
    reduce.json         the summary as data (schema_version 1)
    README.md           the summary for the bug report

The bundle is written in a private temporary directory beside OUT and renamed into place,
so an interrupted write leaves nothing behind.
"""

from __future__ import annotations

import json
import os
import shutil
import tempfile
from collections.abc import Mapping
from pathlib import Path
from typing import NotRequired, TypedDict

import numpy as np
import onnx
import yaml

from guard.core.errors import UsageError
from guard.core.fsutil import file_sha256
from guard.core.json_types import JsonObject
from guard.golden.meta import Producer
from guard.golden.store import GoldenStore
from guard.reduce.summary import ReduceSummary, SuiteChecks
from guard.suite import ModelEntry

SCHEMA_VERSION = 1


class SuiteEntryYaml(TypedDict):
    """The reproducer suite's one model, as suite.yaml (and base.yaml) write it."""

    name: str
    source: str
    inputs: dict[str, dict[str, str]]  # each {file: inputs.npz, key: NAME}
    backends: list[str]
    target: str
    threads: int
    measure: JsonObject
    checks: SuiteChecks
    options: NotRequired[dict[str, JsonObject]]
    profile: NotRequired[str | None]


def _entry_yaml(
    entry: ModelEntry,
    feeds: Mapping[str, np.ndarray],
    out: Path,
    checks: SuiteChecks,
    backend: str,
) -> SuiteEntryYaml:
    e: SuiteEntryYaml = {
        "name": entry.name,
        "source": "model.onnx",
        # The recorded values, as the golden holds them: the suite's inputs are the
        # golden's, so a run compares against it (inputs that differ make it stale).
        "inputs": {k: {"file": "inputs.npz", "key": k} for k in feeds},
        "backends": [backend],
        "target": entry.target,
        "threads": entry.threads,
        "measure": dict(entry.measure),
        "checks": checks,
    }
    options = {b: dict(o) for b, o in (entry.options or {}).items()}
    for o in options.values():
        tc = o.get("tuning_cache")
        if isinstance(tc, str) and not Path(tc).is_absolute():
            o["tuning_cache"] = str((entry.suite_dir / tc).resolve())
    profile = entry.profile or (options.get("bundled") or {}).get("profile")
    if isinstance(profile, str) and (profile.endswith((".yaml", ".yml")) or "/" in profile):
        src = Path(profile) if Path(profile).is_absolute() else entry.suite_dir / profile
        shutil.copyfile(src, out / src.name)
        profile = src.name
    if options:
        if "bundled" in options and "profile" in options["bundled"]:
            options["bundled"]["profile"] = profile
        e["options"] = options
    if entry.profile:
        e["profile"] = profile
    return e


def suite_yaml(name: str, entry: SuiteEntryYaml) -> str:
    doc = {
        "schema_version": 1,
        "suite": name,
        "description": f"guard reduce reproducer for {entry['name']}",
        "models": [entry],
    }
    return yaml.safe_dump(doc, sort_keys=False)


def write_bundle(
    out: Path,
    *,
    model: onnx.ModelProto,
    feeds: Mapping[str, np.ndarray],
    expected: list[np.ndarray],
    producer: Producer,
    entry: ModelEntry,
    base_entry: ModelEntry | None,
    backend: str,
    summary: ReduceSummary,
    readme: str,
    base_backend: str | None = None,
) -> Path:
    """Write the bundle atomically; returns OUT."""

    out = out.resolve()
    if out.exists() and (not out.is_dir() or any(out.iterdir())):
        raise UsageError(
            "the bundle directory exists and is not empty",
            where=str(out),
            hint="Pass --out with a new directory.",
        )
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{out.name}.", dir=out.parent))
    try:
        onnx.save(model, str(tmp / "model.onnx"))
        # Numeric tensors only, as the golden beside it (loaded with allow_pickle=False).
        arrays = {k: np.asarray(v) for k, v in feeds.items()}
        np.savez(tmp / "inputs.npz", allow_pickle=False, **arrays)
        suite_name = f"reduce-{entry.name}"
        checks = summary["suite_checks"].copy()
        e = _entry_yaml(entry, feeds, tmp, checks, backend)
        (tmp / "suite.yaml").write_text(suite_yaml(suite_name, e))
        if base_entry is not None:
            b = _entry_yaml(base_entry, feeds, tmp, {}, base_backend or backend)
            (tmp / "base.yaml").write_text(suite_yaml(suite_name, b))
        names = [o.name for o in model.graph.output]
        GoldenStore(tmp / "goldens" / suite_name).save(
            entry.name,
            {k: np.asarray(v) for k, v in feeds.items()},
            dict(zip(names, expected, strict=True)),
            producer=producer,
            model_sha256=file_sha256(tmp / "model.onnx"),
            reason=f"guard reduce of {entry.name}: the reference's outputs on the cut",
        )
        (tmp / "reduce.json").write_text(
            json.dumps(
                {"schema_version": SCHEMA_VERSION, **summary}, indent=2, sort_keys=True, default=str
            )
            + "\n"
        )
        (tmp / "README.md").write_text(readme)
        if out.exists():
            out.rmdir()
        os.replace(tmp, out)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    return out
