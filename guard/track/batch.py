"""The one primitive every run-data write goes through: ``MlflowClient.log_batch``, chunked.

Per-metric calls over HTTP are one request each; one batch per run is one request (or a
few, when a run carries raw samples or a large manifest). Chunks respect every limit MLflow
enforces on a batch: 1000 metrics, 100 params, 100 tags, 1000 entities in all, and a
request under 1 MB.
"""

from __future__ import annotations

import time
from collections import deque
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # mlflow itself is imported only when a client is made
    from mlflow import MlflowClient

# mlflow.utils.validation; pinned to the installed MLflow by a test.
MAX_METRICS_PER_BATCH = 1000
MAX_PARAMS_TAGS_PER_BATCH = 100
MAX_ENTITIES_PER_BATCH = 1000
MAX_BATCH_LOG_REQUEST_SIZE = int(1e6)
# Headroom for JSON framing and per-entity fields (timestamp, step) the estimate ignores.
_SIZE_BUDGET = int(MAX_BATCH_LOG_REQUEST_SIZE * 0.8)
_ENTITY_OVERHEAD = 64


@dataclass
class Chunk:
    metrics: list[Any] = field(default_factory=list)
    params: list[Any] = field(default_factory=list)
    tags: list[Any] = field(default_factory=list)
    size: int = 0

    def count(self) -> int:
        return len(self.metrics) + len(self.params) + len(self.tags)


def _size(entity: Any) -> int:
    return _ENTITY_OVERHEAD + len(entity.key) + len(str(entity.value))


def chunk(metrics: Iterable[Any], params: Iterable[Any], tags: Iterable[Any]) -> Iterator[Chunk]:
    """Split entities into as few batches as MLflow accepts, keeping order within each kind.

    Each batch takes up to 100 params and 100 tags, then fills with metrics up to the
    entity and size limits.
    """
    queues = {"params": deque(params), "tags": deque(tags), "metrics": deque(metrics)}
    caps = {
        "params": MAX_PARAMS_TAGS_PER_BATCH,
        "tags": MAX_PARAMS_TAGS_PER_BATCH,
        "metrics": MAX_METRICS_PER_BATCH,
    }
    while any(queues.values()):
        current = Chunk()
        for kind, queue in queues.items():
            taken = getattr(current, kind)
            while queue and len(taken) < caps[kind] and current.count() < MAX_ENTITIES_PER_BATCH:
                size = _size(queue[0])
                if current.count() and current.size + size > _SIZE_BUDGET:
                    break
                taken.append(queue.popleft())
                current.size += size
        yield current


def metric_entities(
    values: Mapping[str, float],
    history: Mapping[str, list[tuple[int, float]]] | None = None,
    timestamp: int | None = None,
) -> list[Any]:
    """Metric entities at one timestamp (now unless given): scalars at step 0, histories
    as (step, value). At a fixed timestamp, logging the same values again adds nothing."""
    from mlflow.entities import Metric

    now = int(time.time() * 1000) if timestamp is None else int(timestamp)
    out = [Metric(key, float(v), now, 0) for key, v in values.items()]
    for key, series in (history or {}).items():
        out.extend(Metric(key, float(v), now, int(step)) for step, v in series)
    return out


def _log_batch(
    client: MlflowClient,
    run_id: str,
    metrics: Iterable[Any] = (),
    params: Mapping[str, str] | None = None,
    tags: Mapping[str, str] | None = None,
) -> int:
    """Write metrics (entities), params and tags to one run; return the number of requests.

    Param and tag keys must already be legal (guard.track.records.clean_key); values are
    strings within MLflow's length limits.
    """
    from mlflow.entities import Param, RunTag

    param_entities = [Param(k, v) for k, v in (params or {}).items()]
    tag_entities = [RunTag(k, v) for k, v in (tags or {}).items()]
    requests = 0
    for batch in chunk(metrics, param_entities, tag_entities):
        client.log_batch(
            run_id, metrics=batch.metrics, params=batch.params, tags=batch.tags, synchronous=True
        )
        requests += 1
    return requests
