"""Probe ORT's memory in a fresh process: ``python -m guard.backends.ort_probe SPEC.json``.

ORT reports its arena only in its own verbose log (BFCArena "Extended allocation" /
"Total allocated bytes" lines) and per-node output sizes only in its profiler. Both are
process-global settings, so the probe runs in a child process with its stderr captured:
the caller parses the log and the JSON this prints on stdout.
"""

from __future__ import annotations

import json
import sys
import tempfile
from pathlib import Path

import numpy as np

RUN_MARK = "=== guard-probe: run ==="
DONE_MARK = "=== guard-probe: done ==="


def main(spec_path: str) -> int:
    import onnxruntime as ort

    from guard.backends.onnxruntime import _np_dtype, session_options

    spec = json.loads(Path(spec_path).read_text())
    with tempfile.TemporaryDirectory(prefix="guard-ort-prof-", dir=spec.get("work_dir")) as tmp:
        so = session_options(spec["threads"], spec["level"], profile_dir=Path(tmp))
        # After session_options(), which quiets the default logger: the arena speaks only
        # at INFO level.
        ort.set_default_logger_severity(0)
        ort.set_default_logger_verbosity(0)
        so.log_severity_level = 0
        sess = ort.InferenceSession(spec["model"], so, providers=spec["providers"])
        feeds = {i.name: np.zeros(spec["shapes"][i.name], dtype=_np_dtype(i.type))
                 for i in sess.get_inputs()}
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
    print(json.dumps({"order": order[-n:] if n else []}))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1]))
