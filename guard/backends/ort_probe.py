"""Probe ORT's memory in a fresh process: ``python -m guard.backends.ort_probe SPEC.json``.

ORT reports its arena only in its own verbose log (BFCArena "Extended allocation" /
"Total allocated bytes" lines) and per-node output sizes only in its profiler. Both are
process-global settings, so the probe runs in a child process with its stderr captured:
the caller parses the log and the JSON this prints on stdout.

The model runs on the suite's bound inputs (``SPEC["inputs"]``, an .npz the caller wrote):
a model whose behaviour depends on an input's value (a sample rate steering an If) must
be probed on the values it is measured with. When the session cannot be created or run,
the probe prints ``ERROR_MARK`` and onnxruntime's own message as one line on stderr, so
the caller reports that rather than the last line of the verbose log.
"""

from __future__ import annotations

import json
import sys
import tempfile
from pathlib import Path

import numpy as np

from guard.backends.ort_memory import DONE_MARK, ERROR_MARK, RUN_MARK
from guard.backends.ort_session import session_options


def _probe(spec: dict) -> dict:
    import onnxruntime as ort

    with np.load(spec["inputs"]) as npz:
        feeds = {k: npz[k] for k in npz.files}
    with tempfile.TemporaryDirectory(prefix="guard-ort-prof-", dir=spec.get("work_dir")) as tmp:
        so = session_options(spec["threads"], spec["level"], profile_dir=Path(tmp))
        # After session_options(), which quiets the default logger: the arena speaks only
        # at INFO level.
        ort.set_default_logger_severity(0)
        ort.set_default_logger_verbosity(0)
        so.log_severity_level = 0
        sess = ort.InferenceSession(spec["model"], so, providers=spec["providers"])
        print(RUN_MARK, file=sys.stderr, flush=True)
        # ORT plans its memory pattern on the first run and allocates the planned block on
        # the second; the third confirms the steady state.
        for _ in range(3):
            sess.run(None, feeds)
        print(DONE_MARK, file=sys.stderr, flush=True)
        prof = Path(sess.end_profiling())
        events = json.loads(prof.read_text())
    order = []
    for ev in events:
        if ev.get("cat") == "Node" and str(ev.get("name", "")).endswith("_kernel_time"):
            args = ev.get("args", {})
            order.append([ev["name"][: -len("_kernel_time")], int(args.get("output_size", 0))])
    # One run's worth of nodes: the profile holds all three runs.
    n = len(order) // 3 if len(order) % 3 == 0 else len(order)
    return {"order": order[-n:] if n else []}


def main(spec_path: str) -> int:
    spec = json.loads(Path(spec_path).read_text())
    try:
        out = _probe(spec)
    except Exception as exc:  # noqa: BLE001 - onnxruntime's message goes back to the caller
        text = " ".join(str(exc).split()) or type(exc).__name__
        print(f"{ERROR_MARK} {type(exc).__name__}: {text}", file=sys.stderr, flush=True)
        return 1
    print(json.dumps(out))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1]))
