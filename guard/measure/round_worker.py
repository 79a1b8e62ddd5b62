"""A round worker: a fresh interpreter that measures rounds of ``guard run``'s results.

guard.measure.round_runner starts these with ``python -m guard.measure.round_worker RFD WFD [BACKEND...]``
and hands each one request per round: load the artefact's session, call it once (lazy
initialisation, untimed), then warm up and time it as ``guard.measure.timer.measure`` does,
pinned to the cores the request names, with the host-speed probe read around the loop
(guard.measure.host_speed). The reply is the round's ``Timings``. Requests and
replies are pickles framed by ``multiprocessing.connection`` on the two pipe ends whose
numbers are the first two arguments; only guard's own values cross them (the parent
wrote the request, this process the reply). The backends named after them are imported
at start, while the parent is still building.

The protocol keeps its own pipes: whatever the backend's libraries print goes to stderr,
so stdout (``guard run --json -``) and the protocol stay clean. A request of ``None`` or
the end of the pipe ends the worker.
"""

from __future__ import annotations

import gc
import os
import sys
import time
from multiprocessing.connection import Connection
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypedDict

if TYPE_CHECKING:
    import numpy as np

    from guard.manifest.written import ManifestJson
    from guard.measure.timer import MeasureConfig, Timings


class RoundRequest(TypedDict):
    """One round to measure, as guard.measure.round_runner sends it."""

    backend: str
    artefact: str  # the artefact directory
    manifest: ManifestJson
    threads: int
    feeds: dict[str, np.ndarray]
    config: MeasureConfig  # the round's share of the result's (MeasureConfig.per_round)
    cpus: list[int] | None  # the cores to pin to (None: as the worker started)


def measure_round(req: RoundRequest) -> Timings:
    """One round: a fresh session of ``req["artefact"]``, warmed up and timed."""
    from guard.backends import get_backend
    from guard.emulate.load import load_session
    from guard.measure.host_speed import read
    from guard.measure.timer import measure
    from guard.results.manifest import Manifest

    cpus = req.get("cpus")
    if cpus and hasattr(os, "sched_setaffinity"):
        os.sched_setaffinity(0, cpus)
    backend = get_backend(req["backend"])
    manifest = Manifest.from_json(req["manifest"])
    session: Any = load_session(backend, Path(req["artefact"]), req["threads"], manifest)
    feeds = req["feeds"]
    try:
        session.run(feeds)
        return measure(lambda: session.run(feeds), req["config"], time.perf_counter, host=read)
    finally:
        session = None  # the next round's session is this round's size again, not twice
        gc.collect()


def serve(inbox: Connection, outbox: Connection) -> int:
    from guard.core.isolate import outcome, packed

    outbox.send(("ready", os.getpid()))
    while True:
        try:
            req = inbox.recv()
        except EOFError:
            return 0
        if req is None:
            return 0
        # the reply is guard.core.isolate's: an outcome, pickled, text where it cannot travel
        outbox.send_bytes(packed(outcome(measure_round, req)))


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    inbox = Connection(int(args[0]), writable=False)
    outbox = Connection(int(args[1]), readable=False)
    os.dup2(2, 1)  # the libraries' prints go to stderr
    sys.stdout = sys.stderr
    try:
        from guard.backends import get_backend

        for name in args[2:]:
            try:
                get_backend(name)
            except Exception:  # noqa: BLE001, S112 - the round's own load reports it
                continue
        return serve(inbox, outbox)
    except (BrokenPipeError, EOFError, KeyboardInterrupt):
        # guard stopped (a Ctrl-C while this worker was still starting, or mid-round) and
        # closed its ends: there is no one to reply to, and nothing for the user to read.
        return 0


if __name__ == "__main__":
    sys.exit(main())
