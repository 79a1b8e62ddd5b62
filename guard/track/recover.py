"""Invocations a kill left half-logged: found, ended KILLED, and finished by the next push.

MLflow has no transaction across runs, so guard makes the parent run the commit point:

- a parent is created RUNNING with the process that logs it (``guard.pid``, its start
  time, ``guard.host``) and the results' digest (``guard.results_sha256``); each child
  carries ``guard.child_key`` (the digest and the result's index) and ends FINISHED once
  fully logged; the parent ends FINISHED last;
- readers take a child only when its parent is FINISHED (guard.track.query), so a kill at
  any point before that leaves nothing they count;
- the next ``guard run`` or ``guard track push`` into the experiment ends every RUNNING
  parent of this host whose process is gone as KILLED, ends its unfinished children KILLED
  and tags every child ``guard.parent_killed`` (:func:`end_dead`);
- logging results whose digest has a parent already either does nothing (it is FINISHED)
  or finishes that parent (:func:`resumable`): children whose key is logged FINISHED are
  kept, unfinished ones deleted and logged again, so no result ever has two children.
"""

from __future__ import annotations

import os
import socket
from collections.abc import Mapping
from functools import lru_cache
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # mlflow itself is imported only when a client is made
    from mlflow import MlflowClient
    from mlflow.entities import Run

PID_TAG = "guard.pid"
PID_START_TAG = "guard.pid_started"
HOST_TAG = "guard.host"
DIGEST_TAG = "guard.results_sha256"
CHILD_KEY_TAG = "guard.child_key"
PARENT_KILLED_TAG = "guard.parent_killed"


@lru_cache(maxsize=1)
def host() -> str:
    return socket.gethostname().replace("'", "_")


def _started(pid: int) -> str:
    """The process's start time in clock ticks since boot ('' where /proc is absent): with
    the pid, it tells a dead process from a new one that reuses its pid."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            return f.read().rsplit(b")", 1)[1].split()[19].decode()
    except (OSError, IndexError):
        return ""


def owner_tags() -> dict[str, str]:
    """The tags naming this process as the one logging a parent."""
    pid = os.getpid()
    return {PID_TAG: str(pid), PID_START_TAG: _started(pid), HOST_TAG: host()}


def owner_gone(tags: Mapping[str, str]) -> bool:
    """Whether the process named by a parent's owner tags is gone (only on its own host)."""
    pid = tags.get(PID_TAG, "")
    if tags.get(HOST_TAG) != host() or not pid.isdigit():
        return False
    try:
        os.kill(int(pid), 0)
    except ProcessLookupError:
        return True
    except OSError:
        pass  # exists, another user's
    recorded = tags.get(PID_START_TAG)
    return bool(recorded) and _started(int(pid)) != recorded


def children(client: MlflowClient, experiment_id: str, parent_id: str) -> list[Run]:
    return list(
        client.search_runs(
            [experiment_id],
            filter_string=f"tags.mlflow.parentRunId = '{parent_id}'",
            max_results=10_000,
        )
    )


def end_killed(client: MlflowClient, experiment_id: str, parent_id: str, status: str) -> None:
    """End a parent that will not finish (KILLED, FAILED): its unfinished children get the
    same status, every child the ``guard.parent_killed`` tag. Children logged in full stay
    FINISHED, so finishing the invocation later keeps them instead of logging them twice."""
    from guard.track.batch import _log_batch

    for child in children(client, experiment_id, parent_id):
        _log_batch(client, child.info.run_id, tags={PARENT_KILLED_TAG: status})
        if child.info.status != "FINISHED":
            client.set_terminated(child.info.run_id, status=status)
    client.set_terminated(parent_id, status=status)


def end_dead(client: MlflowClient, experiment_id: str) -> list[str]:
    """End KILLED every RUNNING parent of this host whose process is gone; their ids."""
    running = client.search_runs(
        [experiment_id],
        filter_string=f"attributes.status = 'RUNNING' and tags.`{HOST_TAG}` = '{host()}'",
        max_results=1000,
    )
    ended = []
    for run in running:
        if run.data.tags.get("mlflow.parentRunId") is None and owner_gone(run.data.tags):
            end_killed(client, experiment_id, run.info.run_id, "KILLED")
            ended.append(run.info.run_id)
    return ended


def parents_of(client: MlflowClient, experiment_id: str, digest: str) -> list[Run]:
    """Every parent logged with this results digest, oldest first, whatever its status."""
    runs = client.search_runs(
        [experiment_id],
        filter_string=f"tags.`{DIGEST_TAG}` = '{digest}' and tags.`guard.level` = 'invocation'",
        max_results=1000,
    )
    return sorted(runs, key=lambda r: (r.info.start_time or 0, r.info.run_id))


COMPLETE_TAG = "guard.logged"  # "true" once every child is logged: FINISHED or FAILED then


def logged_in_full(run: Run) -> bool:
    """An invocation logged in full: FINISHED, or FAILED (a result guard could not
    produce) with the complete tag; FAILED without it was cut short while logging."""
    status = run.info.status
    return status == "FINISHED" or (
        status == "FAILED" and run.data.tags.get(COMPLETE_TAG) == "true"
    )


def resumable(parents: list[Run]) -> tuple[Run | None, Run | None]:
    """(a FINISHED parent, else None; a parent to finish, else None) among ``parents``.

    A parent still RUNNING under a live process is being logged right now: it is neither.
    """
    done = next((r for r in parents if logged_in_full(r)), None)
    if done is not None:
        return done, None
    open_ = [r for r in parents if r.info.status != "RUNNING" or owner_gone(r.data.tags)]
    return None, (open_[0] if open_ else None)


def being_logged(parents: list[Run]) -> Run | None:
    """A parent still RUNNING whose process may be alive (here, or on another host)."""
    return next(
        (r for r in parents if r.info.status == "RUNNING" and not owner_gone(r.data.tags)), None
    )


def child_key(digest: str, index: int) -> str:
    return f"{digest[:32]}/{index}"
