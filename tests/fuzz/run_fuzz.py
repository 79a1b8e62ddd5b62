"""Fuzz guard for a long time, on demand: ``python tests/fuzz/run_fuzz.py --minutes 60``.

Breaches are written to tests/fuzz/corpus/ as they are found (commit them: they become
regression cases). Prints one progress line per batch and a summary; exits 1 on a breach.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from fuzz_harness import CORPUS, fuzz  # noqa: E402


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("--minutes", type=float, default=60.0)
    p.add_argument(
        "--backend",
        action="append",
        help="backends to draw from (default onnxruntime; repeatable: bundled, tvm)",
    )
    p.add_argument("--corpus", type=Path, default=CORPUS)
    p.add_argument("--json", type=Path, help="write the summary as JSON here")
    args = p.parse_args()
    with tempfile.TemporaryDirectory(prefix="guard-fuzz-") as root:
        report = fuzz(
            args.minutes * 60,
            Path(root),
            backends=tuple(args.backend or ["onnxruntime"]),
            corpus=args.corpus,
            log=lambda s: print(s, flush=True),
        )
    print(f"fuzz: {report.summary()}")
    if args.json:
        args.json.write_text(json.dumps(report.__dict__, indent=2, default=str) + "\n")
    return 1 if report.breaches else 0


if __name__ == "__main__":
    sys.exit(main())
