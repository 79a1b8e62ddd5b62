"""Bundled compiler on a long elementwise chain: seconds to import, optimise and plan.

    python benchmarks/long_chain.py 10000 30000 100000

Issue 16 item 7: fuse_elementwise asked for consumers once per node, so a chain of 10^4
nodes took 4.3 s, 3x10^4 28.6 s and 10^5 did not finish in 300 s. The passes are linear
now (tests/compiler/test_fuse_elementwise.py counts the work); this measures the seconds,
with the other processes' CPU share over the run, since the machine is shared.
"""

from __future__ import annotations

import os
import sys
import tempfile
import time
from pathlib import Path

import onnx
from onnx import TensorProto, helper


def chain(n: int, path: Path) -> Path:
    ops = ["Relu", "Neg", "Abs", "Sigmoid"]
    nodes, prev = [], "x"
    for i in range(n):
        out = "y" if i == n - 1 else f"t{i}"
        nodes.append(helper.make_node(ops[i % 4], [prev], [out], name=f"n{i}"))
        prev = out
    g = helper.make_graph(
        nodes,
        "chain",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 16])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 16])],
    )
    onnx.save(helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)]), path)
    return path


def _busy() -> float:
    """Busy CPU seconds of the whole machine so far (from /proc/stat)."""
    fields = Path("/proc/stat").read_text().splitlines()[0].split()[1:]
    vals = [int(v) for v in fields]
    return (sum(vals) - vals[3] - vals[4]) / os.sysconf("SC_CLK_TCK")


def main(sizes: list[int]) -> None:
    from guard.compiler.partition.plan import compile_model

    with tempfile.TemporaryDirectory() as tmp:
        for n in sizes:
            path = chain(n, Path(tmp) / f"chain{n}.onnx")
            busy0, own0, t0 = _busy(), time.process_time(), time.perf_counter()
            compile_model(path, {"x": (1, 16)})
            wall = time.perf_counter() - t0
            others = (_busy() - busy0) - (time.process_time() - own0)
            print(
                f"{n:>7} nodes: {wall:6.1f} s (other processes used {others / wall:.1f} "
                f"CPUs meanwhile)",
                flush=True,
            )


if __name__ == "__main__":
    main([int(a) for a in sys.argv[1:]] or [10_000, 30_000, 100_000])
