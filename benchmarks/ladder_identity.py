"""The ladder's search is a pure function of the model: check that a change keeps it so.

Climbs the ladder (guard.compiler.fit.ladder.climb) on each model as
benchmarks/memory_ladder.py's one() does, but with no search bound (a time cut would make
the result depend on the machine's load), and writes every rung's ``to_dict()`` with the
seconds taken out (the ``seconds`` fields, and the "0.01 s" a schedule search prints in
its text). Run it on two trees and compare the files:

    PYTHONPATH=OLD python benchmarks/ladder_identity.py --out before.json
    PYTHONPATH=NEW python benchmarks/ladder_identity.py --out after.json --against before.json

(The tree on PYTHONPATH is the one measured, this file's included or not.) It prints, per model, the search's seconds (quantising apart) and each rung's.
"""

from __future__ import annotations

import argparse
import json
import re
import time
from pathlib import Path
from typing import Any

from benchmarks.memory_ladder import MODELS, locate
from guard.compiler import import_onnx, optimize, verify
from guard.compiler.codegen.llvm_target import codegen_target
from guard.compiler.fit.int8 import Quantised
from guard.compiler.fit.ladder import climb
from guard.compiler.partition.plan import plan
from guard.quantize.fit_hook import quantise_hook

ZOO = ("densenet121", "inception_v1", "vgg19")
SECONDS = re.compile(r"\b\d+\.\d+ s\b")


def ladder_of(name: str) -> tuple[dict[str, Any], str]:
    """The model's ladder without seconds, and a line of the phases' seconds."""
    how, shapes = MODELS.get(name, (("zoo", name), {}))
    path = locate(how)
    t = time.perf_counter()
    graph = import_onnx(path, dict(shapes))
    optimised, _ = optimize(graph, "O2", target=codegen_target("host").table)
    verify(optimised)
    budget = plan(optimised).arena_bytes // 4
    hook = quantise_hook(path, shapes, table=codegen_target("host").table)
    quantising = [0.0]

    def timed() -> Quantised:
        s = time.perf_counter()
        out = hook()
        quantising[0] = time.perf_counter() - s
        return out

    load = time.perf_counter() - t
    t = time.perf_counter()
    ladder = climb(optimised, budget, stop_at_fit=False, search_s=1e9, quantise=timed)
    total = time.perf_counter() - t
    d: dict[str, Any] = dict(ladder.to_dict())
    d.pop("search_s")
    d["ladder"] = [
        {**{k: v for k, v in s.items() if k != "seconds"}, "what": SECONDS.sub("_ s", s["what"])}
        for s in d["ladder"]
    ]
    rungs = ", ".join(f"{s.rung}: {s.seconds:.1f}" for s in ladder.steps)
    line = (
        f"{name}: load {load:.1f} s, climb {total:.1f} s (quantising {quantising[0]:.1f} s, "
        f"search {total - quantising[0]:.1f} s); rungs {rungs}"
    )
    return d, line


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--models", default=",".join((*ZOO, "ppocr_v4_det_640")))
    ap.add_argument("--out", required=True)
    ap.add_argument("--against", help="a file an earlier run wrote: fail where they differ")
    args = ap.parse_args()
    got = {}
    for name in args.models.split(","):
        got[name], line = ladder_of(name)
        print(line, flush=True)
    Path(args.out).write_text(json.dumps(got, indent=1, sort_keys=True) + "\n")
    if args.against:
        want = json.loads(Path(args.against).read_text())
        differ = [m for m in got if want.get(m) != got[m]]
        if differ:
            raise SystemExit(f"the ladder differs on {', '.join(differ)}")
        print(f"identical on {', '.join(got)}")


if __name__ == "__main__":
    main()
