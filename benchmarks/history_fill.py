"""Fill an MLflow store with realistic guard history, in bulk.

Logging through MLflow's client costs ~0.1 s a run here, so 50k runs would take well over an
hour. Instead the rows guard would log are written straight into MLflow's own tables
(``mlflow.store.tracking.dbmodels.models``: runs, tags, params, metrics, latest_metrics), in
batches of a few thousand rows, through SQLAlchemy on the store's database, after MLflow
created the schema (its migrations) and the experiment (its client). What goes in each row
is computed by guard's own mapping (``guard.track.records``: child_tags, parent_tags,
manifest_params, result_metrics, sample_history; ``guard.track.index.result_tags``), from a real results document
(benchmarks/results/history_template.json, a `guard run` of suites/default.yaml with raw
samples thinned to 200), varied per invocation: commit, branch (60% main, the rest on 300
feature branches), arch (x86_64 / aarch64 alternately), latency (lognormal noise, a slow
drift), a failing verdict now and then. Each result run gets its ``result.json`` and each
invocation its ``results.json`` artifact as files in the artifact root, where MLflow's
artifact repository reads them. What is not filled: manifest.json artifacts and dataset
inputs (no query guard makes reads them).
"""

from __future__ import annotations

import copy
import hashlib
import json
import math
import random
import time
import uuid
from pathlib import Path
from typing import Any

from guard.track import index, records
from guard.track.client import experiment_name
from guard.track.log import results_sha256

TEMPLATE = Path(__file__).resolve().parent / "results" / "history_template.json"
SPACING_MS = 10 * 60 * 1000  # one invocation every ten minutes of simulated time
T0_MS = 1_700_000_000_000


def load_template() -> dict[str, Any]:
    return json.loads(TEMPLATE.read_text())


def _vary(template: dict[str, Any], i: int, rng: random.Random) -> dict[str, Any]:
    doc = copy.deepcopy(template)
    commit = hashlib.sha1(f"commit-{i}".encode()).hexdigest()
    branch = "main" if rng.random() < 0.6 else f"feature-{rng.randrange(300)}"
    arch = "x86_64" if i % 2 == 0 else "aarch64"
    started_ms = T0_MS + i * SPACING_MS
    doc["started"] = time.strftime("%Y-%m-%dT%H:%M:%S+00:00", time.gmtime(started_ms / 1000))
    doc["finished"] = time.strftime("%Y-%m-%dT%H:%M:%S+00:00", time.gmtime(started_ms / 1000 + 60))
    doc["git"] = {"commit": commit, "dirty": False, "branch": branch}
    drift = 1.0 + 0.02 * math.sin(i / 200.0)
    for r in doc["results"]:
        m = r.get("manifest") or {}
        host = m.setdefault("host", {})
        host["arch"] = arch
        host["cpu"] = "neoverse-n2" if arch == "aarch64" else host.get("cpu")
        m["sha256"] = hashlib.sha256(f"{m.get('sha256')}-{arch}-{i // 500}".encode()).hexdigest()
        factor = drift * math.exp(rng.gauss(0.0, 0.05)) * (2.0 if arch == "aarch64" else 1.0)
        lat = r.get("latency_ms") or {}
        for k in ("min", "p50", "p90", "p99", "mean"):
            if isinstance(lat.get(k), int | float):
                lat[k] = lat[k] * factor
        if isinstance(r.get("samples_ms"), list):
            r["samples_ms"] = [s * factor for s in r["samples_ms"]]
        if rng.random() < 0.03:
            r["verdict"] = "fail"
        r["duration_s"] = round(float(r.get("duration_s") or 1.0) * factor, 3)
    return doc


def _metric_rows(
    run_id: str, values: dict[str, float], history: list[tuple[int, float]], ts: int
) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    rows, latest = [], []
    for key, v in values.items():
        nan = not math.isfinite(v)
        row = {
            "key": key,
            "value": 0.0 if nan else v,
            "timestamp": ts,
            "step": 0,
            "is_nan": nan,
            "run_uuid": run_id,
        }
        rows.append(row)
        latest.append(dict(row))
    for step, v in history:
        rows.append(
            {
                "key": "latency_ms.sample",
                "value": v,
                "timestamp": ts,
                "step": step,
                "is_nan": False,
                "run_uuid": run_id,
            }
        )
    if history:
        step, v = history[-1]
        latest.append(
            {
                "key": "latency_ms.sample",
                "value": v,
                "timestamp": ts,
                "step": step,
                "is_nan": False,
                "run_uuid": run_id,
            }
        )
    return rows, latest


def _run_row(run_id: str, name: str, eid: int, start: int, artifact_uri: str) -> dict[str, Any]:
    return {
        "run_uuid": run_id,
        "name": name,
        "source_type": "LOCAL",
        "source_name": "guard",
        "entry_point_name": "",
        "user_id": "guard",
        "status": "FINISHED",
        "start_time": start,
        "end_time": start + 60_000,
        "deleted_time": None,
        "source_version": "",
        "lifecycle_stage": "active",
        "artifact_uri": artifact_uri,
        "experiment_id": eid,
    }


def _tag_rows(run_id: str, name: str, tags: dict[str, str]) -> list[dict[str, Any]]:
    """MLflow's own run tags (as its client sets them), then guard's (which may set some)."""
    merged = {
        "mlflow.runName": name,
        "mlflow.user": "guard",
        "mlflow.source.type": "LOCAL",
        "mlflow.source.name": "guard",
        **tags,
    }
    return [{"key": k, "value": v, "run_uuid": run_id} for k, v in merged.items()]


class Filler:
    """Appends invocations (a parent and one child per result) to ``suite``'s experiment.

    ``artifact_dir`` is where the experiment's artifact location points on disk (for a
    server: its --artifacts-destination joined with the experiment id).
    """

    def __init__(
        self, tracking_uri: str, db_uri: str, suite: str, artifact_dir: Path, seed: int = 0
    ) -> None:
        import sqlalchemy
        from mlflow import MlflowClient

        from guard.track.client import experiment_id

        client = MlflowClient(tracking_uri)
        self.eid = int(experiment_id(client, tracking_uri, suite))
        self.location = client.get_experiment(str(self.eid)).artifact_location.rstrip("/")
        self.artifact_dir = Path(artifact_dir)
        self.engine = sqlalchemy.create_engine(db_uri)
        self.template = load_template()
        self.rng = random.Random(seed)
        self.invocations = 0
        self.runs = 0

    def add_runs(self, target_runs: int, batch_invocations: int = 100) -> float:
        """Add invocations until the experiment holds at least ``target_runs`` runs; seconds."""
        t = time.perf_counter()
        per = 1 + len(self.template["results"])
        while self.runs < target_runs:
            n = min(batch_invocations, -(-(target_runs - self.runs) // per))
            self._insert([self._invocation(self.invocations + k) for k in range(n)])
            self.invocations += n
            self.runs += n * per
        return time.perf_counter() - t

    def _invocation(self, i: int) -> dict[str, list[dict[str, Any]]]:
        doc = _vary(self.template, i, self.rng)
        start = T0_MS + i * SPACING_MS
        out: dict[str, list[dict[str, Any]]] = {
            "runs": [],
            "tags": [],
            "params": [],
            "metrics": [],
            "latest_metrics": [],
        }
        pid = uuid.uuid4().hex
        pname = f"{doc['suite']}@{doc['git']['commit'][:10]}"
        arch = records.host_arch(doc) or "x86_64"
        out["runs"].append(_run_row(pid, pname, self.eid, start, self._art_uri(pid)))
        out["tags"] += _tag_rows(pid, pname, records.parent_tags(doc, arch, results_sha256(doc)))
        out["params"] += [
            {"key": "suite", "value": doc["suite"], "run_uuid": pid},
            {"key": "schema_version", "value": "1", "run_uuid": pid},
        ]
        rows, latest = _metric_rows(pid, records.parent_metrics(doc), [], start)
        out["metrics"] += rows
        out["latest_metrics"] += latest
        self._write_artifact(pid, "results.json", doc)
        for k, r in enumerate(doc["results"]):
            cid = uuid.uuid4().hex
            name = records.child_name(r)
            cstart = start + 1000 * (k + 1)
            out["runs"].append(_run_row(cid, name, self.eid, cstart, self._art_uri(cid)))
            tags = {
                "mlflow.parentRunId": pid,
                **records.child_tags(r, doc),
                **index.result_tags(r, doc),
            }
            out["tags"] += _tag_rows(cid, name, tags)
            out["params"] += [
                {"key": k2, "value": v, "run_uuid": cid}
                for k2, v in records.manifest_params(r.get("manifest")).items()
            ]
            rows, latest = _metric_rows(
                cid, records.result_metrics(r), records.sample_history(r), cstart
            )
            out["metrics"] += rows
            out["latest_metrics"] += latest
            self._write_artifact(cid, "result.json", r)
        return out

    def _art_uri(self, run_id: str) -> str:
        return f"{self.location}/{run_id}/artifacts"

    def _write_artifact(self, run_id: str, name: str, obj: Any) -> None:
        d = self.artifact_dir / run_id / "artifacts"
        d.mkdir(parents=True, exist_ok=True)
        (d / name).write_text(json.dumps(obj, default=str))

    def _insert(self, invocations: list[dict[str, list[dict[str, Any]]]]) -> None:
        from mlflow.store.tracking.dbmodels import models as m

        tables = {
            "runs": m.SqlRun,
            "tags": m.SqlTag,
            "params": m.SqlParam,
            "metrics": m.SqlMetric,
            "latest_metrics": m.SqlLatestMetric,
        }
        with self.engine.begin() as conn:
            for name, model in tables.items():
                rows = [row for inv in invocations for row in inv[name]]
                for start in range(0, len(rows), 5000):
                    conn.execute(model.__table__.insert(), rows[start : start + 5000])

    def experiment(self) -> str:
        return experiment_name(self.template["suite"])
