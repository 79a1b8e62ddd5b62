"""guard init on each benchmark model, then the next guard run of the suite it wrote.

The models are those of ``test_backends_vs_onnxruntime.py`` (MODELS): the zoo's real
topologies, the transformer layers, the MLP and the digits classifier, none of which guard
init has seen. Each one is copied to its own directory as a plain .onnx file, ``guard
init`` writes ``suite.yaml`` beside it (a fresh suite per model), and ``guard run`` runs it
once, as written. Run:

    python benchmarks/init_models.py [--models a,b] [--out benchmarks/results/init_models.json]

It writes one row per model: init's exit code, the backends it chose and refused (with
why), the run's exit code and each result's verdict, and the seconds each step took.
"""

from __future__ import annotations

import argparse
import json
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
from test_backends_vs_onnxruntime import MODELS  # noqa: E402

RESULTS = Path(__file__).parent / "results"


def one(name: str, root: Path) -> dict:
    from guard import zoo

    d = root / name
    d.mkdir()
    shutil.copy(zoo.model_path(name), d / f"{name}.onnx")
    row: dict = {"model": name}
    t0 = time.monotonic()
    init = subprocess.run(
        ["guard", "init", f"{name}.onnx", "--suite", "suite.yaml"],
        cwd=d, capture_output=True, text=True,
    )  # fmt: skip
    row["init_exit"], row["init_s"] = init.returncode, round(time.monotonic() - t0, 1)
    row["init_output"] = (init.stdout + init.stderr).strip().splitlines()[-6:]
    if init.returncode != 0:
        return row
    t0 = time.monotonic()
    run = subprocess.run(
        ["guard", "run", "suite.yaml", "--no-track", "--json", "r.json"],
        cwd=d, capture_output=True, text=True,
    )  # fmt: skip
    row["run_exit"], row["run_s"] = run.returncode, round(time.monotonic() - t0, 1)
    try:
        doc = json.loads((d / "r.json").read_text())
        row["verdicts"] = {r["backend"]: r["verdict"] for r in doc["results"]}
    except (OSError, ValueError):
        row["run_output"] = (run.stdout + run.stderr).strip().splitlines()[-6:]
    return row


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--models", help="comma-separated subset of MODELS")
    ap.add_argument("--out", type=Path, default=RESULTS / "init_models.json")
    args = ap.parse_args()
    names = args.models.split(",") if args.models else list(MODELS)
    rows = []
    with tempfile.TemporaryDirectory(prefix="guard-init-") as tmp:
        for name in names:
            rows.append(one(name, Path(tmp)))
            print(json.dumps(rows[-1]), flush=True)
            args.out.write_text(json.dumps(rows, indent=1) + "\n")
    ok = sum(r.get("run_exit") == 0 for r in rows)
    print(f"{ok} of {len(rows)} models: guard init, then guard run exit 0")
    return 0 if ok == len(rows) else 1


if __name__ == "__main__":
    sys.exit(main())
