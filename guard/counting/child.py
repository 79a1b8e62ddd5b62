"""The process a counted run starts: load, warm up, count N inferences.

``python -m guard.counting.child SPEC.json`` under ``qemu-x86_64 -cpu max`` with the
counting plugin (guard.counting.emulator), or natively with the hardware counter
(guard.counting.pmu). SPEC names the backend, the artefact, the inputs (an ``.npz``), the
warm-up calls and the inferences to count. Interpreter start-up, imports, loading and
warm-up are not counted. Under the emulator each counted inference is one marked region,
entered and left through two tiny machine-code functions (the plugin's marker
instruction, then ``ret``) mapped executable here, so no compiler is needed inside the
emulator. With ``GUARD_PMU_OUT`` in the environment the counter (``GUARD_PMU_EVENT``,
opened before the backend is imported, so the threads it starts inherit it) is reset and
enabled just before each counted inference and disabled just after, and one ``pmu VALUE
ENABLED RUNNING`` line per inference is written to that file, as the static runner writes.

Exit status: 0 done; 2 the spec or the artefact could not be used (the message says why);
3 the hardware counter could not be opened.
"""

from __future__ import annotations

import ctypes
import functools
import gc
import json
import mmap
import os
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypedDict

import numpy as np

from guard.counting.emulator import START_X86, STOP_X86
from guard.counting.pmu import Counter, Event

_RET = b"\xc3"


def marker_functions() -> tuple[Callable[[], None], Callable[[], None], mmap.mmap]:
    """(start, stop, the mapping that holds them: keep it alive while they are called)."""
    code = START_X86 + _RET + b"\x90" * 8 + STOP_X86 + _RET
    page = mmap.mmap(-1, mmap.PAGESIZE, prot=mmap.PROT_READ | mmap.PROT_WRITE | mmap.PROT_EXEC)
    page.write(code)
    base = ctypes.addressof(ctypes.c_char.from_buffer(page))
    proto = ctypes.CFUNCTYPE(None)
    start = proto(base)
    stop = proto(base + len(START_X86) + 1 + 8)
    return start, stop, page


class ChildRequest(TypedDict):
    """What the counting child is asked to count (spec.json, written by guard.counting.count)."""

    backend: str
    artefact: str
    inputs: str  # the .npz of the feeds
    warmup: int
    inferences: int
    model: str | None  # the source model (onnxruntime re-optimises it for the counting CPU)


def load(spec: ChildRequest) -> Any:
    """The backend's session over the artefact, single-threaded and counted-run settings."""
    artefact = Path(spec["artefact"])
    if spec["backend"] == "onnxruntime":
        from guard.backends.onnxruntime import OrtSession

        # The payload is optimised for the host that built it (onnxruntime's NCHWc layout
        # is blocked by the host's vector width): the source model, optimised at the same
        # level here, is what onnxruntime runs on the emulated CPU.
        model = spec["model"]
        source = Path(model) if model else None
        return OrtSession(artefact, 1, source=source)
    from guard.backends import get_backend

    return get_backend(spec["backend"]).load(artefact, 1)


def counter_from_env() -> Counter | None:
    """The hardware counter GUARD_PMU_OUT/GUARD_PMU_EVENT ask for, or None (the emulator)."""
    if not os.environ.get("GUARD_PMU_OUT"):
        return None
    kind, _, config = os.environ.get("GUARD_PMU_EVENT", "0:1").partition(":")
    return Counter(Event(int(kind), int(config), "GUARD_PMU_EVENT"))


def count_calls(run: Callable[[], object], n: int, counter: Counter, out: Path) -> None:
    """Call ``run`` ``n`` times, each inside the counter; one ``pmu`` line per call."""
    lines = []
    for _ in range(n):
        counter.start()
        run()
        value, enabled, running = counter.stop()
        lines.append(f"pmu {value} {enabled} {running}\n")
    out.write_text("".join(lines))


def main(argv: list[str]) -> int:
    if len(argv) != 2:
        print("usage: python -m guard.counting.child SPEC.json", file=sys.stderr)
        return 2
    try:
        counter = counter_from_env()
    except (OSError, ValueError) as exc:
        print(f"count_child: cannot open the hardware counter: {exc}", file=sys.stderr)
        return 3
    spec = json.loads(Path(argv[1]).read_text())
    with np.load(spec["inputs"]) as data:
        feeds = {k: data[k] for k in data.files}
    session = load(spec)
    for _ in range(int(spec["warmup"])):
        session.run(feeds)
    start, stop, page = marker_functions()
    # onnxruntime: inputs and outputs bound once, so that the counted call is the inference
    # and not numpy conversions and output allocations, whose cost follows the heap's history
    # (the tiny mlp spread 0.23% across processes through session.run, 0.01% bound).
    bound = getattr(session, "bound_run", None)
    run = bound(feeds) if bound is not None else functools.partial(session.run, feeds)
    # A garbage collection inside a region would count the interpreter's history, not the
    # inference: collect now, then none until the end.
    gc.collect()
    gc.disable()
    if counter is not None:
        count_calls(run, int(spec["inferences"]), counter, Path(os.environ["GUARD_PMU_OUT"]))
        return 0
    for _ in range(int(spec["inferences"])):
        start()
        run()
        stop()
    del page  # the mapping stays until exit: ctypes still references it
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
