"""An LSTM-heavy model (a CRNN-like sequence head, seeded weights): the bundled code with and
without batch_recurrent_inputs against onnxruntime, interleaved in one process.

The model: x [T, 1, 256] -> bidirectional LSTM (hidden 256) -> [T, 1, 512] -> bidirectional
LSTM (hidden 256) -> [T, 512] @ [512, 97] (the classes), T = 40 and 80 (the sequence
lengths of a text-line recogniser). Per thread count (1, 2) and T, rounds alternate over
onnxruntime, bundled O2 without the pass and bundled O2 (ABCABC...), each round the median of
several calls; printed: each side's median ms, the ratios of medians to onnxruntime, the
p10-p90 of the per-round ratios, and the CPU share other processes took (/proc/stat). The
outputs are checked against onnxruntime (rtol 1e-3, atol 1e-4) before timing.

``--form lens`` gives both LSTMs a ``sequence_lens`` input (every row at full length, as a
tf2onnx export carries it); ``--form batch-first`` makes the model batch first (x [1, T, 256],
both LSTMs ``layout=1``, their Y reshaped with no Transpose between them) with lengths too,
and onnxruntime, which refuses ``layout=1``, runs the sequence-first ``lens`` twin on the same
bytes (batch 1).

    python benchmarks/recurrent_vs_onnxruntime.py [--rounds 9] [--seq 40,80] [--threads 1,2]
                                                  [--form plain|lens|batch-first]
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

sys.path.insert(0, str(Path(__file__).parent))

HIDDEN, FEAT, CLASSES = 256, 256, 97


def crnn_head(seq: int, form: str = "plain") -> onnx.ModelProto:
    rng = np.random.default_rng(0)
    first = int(form == "batch-first")
    lens = ["lens"] if form != "plain" else []

    def w(*shape: int) -> np.ndarray:
        return (rng.standard_normal(shape) / np.sqrt(shape[-1])).astype(np.float32)

    inits, nodes = [], []
    x = "x"
    for k, n_in in enumerate((FEAT, 2 * HIDDEN)):
        names = [f"w{k}", f"r{k}", f"b{k}"]
        vals = [w(2, 4 * HIDDEN, n_in), w(2, 4 * HIDDEN, HIDDEN), w(2, 8 * HIDDEN) * 0.1]
        inits += [numpy_helper.from_array(v, n) for n, v in zip(names, vals, strict=True)]
        nodes.append(helper.make_node("LSTM", [x, *names, *lens], [f"y{k}"], hidden_size=HIDDEN,
                                      direction="bidirectional", layout=first))  # fmt: skip
        if first:  # [1, T, 2, H] -> [1, T, 2H]
            nodes.append(helper.make_node("Reshape", [f"y{k}", "shape3"], [f"s{k}"]))
        else:  # [T, 2, 1, H] -> [T, 1, 2, H] -> [T, 1, 2H]
            nodes.append(helper.make_node("Transpose", [f"y{k}"], [f"t{k}"], perm=[0, 2, 1, 3]))
            nodes.append(helper.make_node("Reshape", [f"t{k}", "shape3"], [f"s{k}"]))
        x = f"s{k}"
    x_shape = [1, seq, FEAT] if first else [seq, 1, FEAT]
    if lens:
        inits.append(numpy_helper.from_array(np.array([seq], np.int32), "lens"))
    inits += [
        numpy_helper.from_array(np.array([*x_shape[:2], 2 * HIDDEN], np.int64), "shape3"),
        numpy_helper.from_array(np.array([seq, 2 * HIDDEN], np.int64), "shape2"),
        numpy_helper.from_array(w(2 * HIDDEN, CLASSES).reshape(2 * HIDDEN, CLASSES), "wc"),
    ]
    nodes += [
        helper.make_node("Reshape", [x, "shape2"], ["flat"]),
        helper.make_node("MatMul", ["flat", "wc"], ["logits"]),
    ]
    g = helper.make_graph(
        nodes, "crnn_head",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, x_shape)],
        [helper.make_tensor_value_info("logits", TensorProto.FLOAT, [seq, CLASSES])], inits,
    )  # fmt: skip
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])


def bundled(model: onnx.ModelProto, threads: int, batched: bool):
    from guard.compiler import import_onnx, optimize
    from guard.compiler.codegen.build import jit
    from guard.compiler.ir.isa_table import DEFAULT_TABLE
    from guard.compiler.partition.plan import plan
    from guard.compiler.passes.batch_recurrent_inputs import BatchRecurrentInputs
    from guard.compiler.passes.pipeline import PIPELINES

    entries = [
        e
        for e in PIPELINES["O2"](DEFAULT_TABLE)
        if batched or not (isinstance(e, tuple) and isinstance(e[0], BatchRecurrentInputs))
    ]
    g, _ = optimize(import_onnx(model), entries=entries)
    compiled = plan(g)
    assert compiled.partition_report["fallback_nodes"] == 0, compiled.partition_text()
    rt, _ = jit(compiled, threads=threads)
    return rt


def main() -> int:
    import onnxruntime as ort
    from test_backends_vs_onnxruntime import _interleaved

    ap = argparse.ArgumentParser()
    ap.add_argument("--rounds", type=int, default=9)
    ap.add_argument("--seq", default="40,80")
    ap.add_argument("--threads", default="1,2")
    ap.add_argument("--form", default="plain", choices=["plain", "lens", "batch-first"])
    args = ap.parse_args()
    rows = []
    for seq in (int(s) for s in args.seq.split(",")):
        model = crnn_head(seq, args.form)
        peer = crnn_head(seq, "lens") if args.form == "batch-first" else model
        x = np.random.default_rng(1).standard_normal((seq, 1, FEAT)).astype(np.float32)
        if args.form == "batch-first":
            x = x.reshape(1, seq, FEAT)  # the same bytes, batch first
        for threads in (int(t) for t in args.threads.split(",")):
            so = ort.SessionOptions()
            so.intra_op_num_threads, so.inter_op_num_threads = threads, 1
            sess = ort.InferenceSession(peer.SerializeToString(), so,
                                        providers=["CPUExecutionProvider"])  # fmt: skip
            want = sess.run(None, {"x": x.reshape(seq, 1, FEAT)})[0]
            sides = [bundled(model, threads, False), bundled(model, threads, True)]
            for rt in sides:
                np.testing.assert_allclose(rt.run({"x": x})["logits"], want, rtol=1e-3, atol=1e-4)

            class Ort:
                def __init__(self, sess) -> None:
                    self.sess = sess

                def run(self, feeds):  # the sequence-first twin's x: a view of the same bytes
                    return self.sess.run(None, {"x": feeds["x"].reshape(-1, 1, FEAT)})

            med, ratios, other, _ = _interleaved([Ort(sess), *sides], {"x": x}, args.rounds)
            row = {
                "form": args.form, "seq": seq, "threads": threads, "ort_ms": med[0] * 1e3,
                "bundled_per_step_ms": med[1] * 1e3, "bundled_batched_ms": med[2] * 1e3,
                "ratio_per_step": float(np.median(ratios[0])),
                "ratio_batched": float(np.median(ratios[1])),
                "ratio_batched_p10_p90": [float(np.percentile(ratios[1], q)) for q in (10, 90)],
                "other_cpu_share": other,
            }  # fmt: skip
            rows.append(row)
            print(json.dumps(row), flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
