"""Small real models and real `guard run`s for the doctor's tests.

Each builder returns an ONNX model; ``run_one`` writes it beside a one-model suite and runs
guard's real pipeline on it (short measurement, no tracking), returning the results
document. Variants differ in exactly one thing, so each test fails one checklist step.
"""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

import numpy as np
import onnx
import yaml
from onnx import TensorProto, helper, numpy_helper

MEASURE = {"warmup_s": 0.01, "min_iters": 5, "min_time_s": 0.02, "max_time_s": 1.0}


def _w(name: str, shape: tuple[int, ...], seed: int) -> onnx.TensorProto:
    rng = np.random.default_rng(seed)
    return numpy_helper.from_array((rng.standard_normal(shape) * 0.2).astype(np.float32), name)


def conv_net(extra: str | None = None, channels: int = 16, convs: int = 6) -> onnx.ModelProto:
    """x[1,C,12,12] -> (Conv, Relu) x convs -> GlobalAveragePool -> Flatten -> Gemm.

    ``extra`` inserts one op after the middle Relu: "LRN" (declined by the gpu-lite
    profile), "InstanceNormalization" (declined by the native code generator: no emitter)
    or "Softmax" (layout-bound: splits the conv region in two).
    """
    nodes, inits = [], []
    cur = "x"
    for i in range(convs):
        inits += [_w(f"w{i}", (channels, channels, 3, 3), i), _w(f"b{i}", (channels,), 100 + i)]
        nodes.append(
            helper.make_node(
                "Conv", [cur, f"w{i}", f"b{i}"], [f"c{i}"], name=f"conv{i}", pads=[1, 1, 1, 1]
            )
        )
        nodes.append(helper.make_node("Relu", [f"c{i}"], [f"r{i}"], name=f"relu{i}"))
        cur = f"r{i}"
        if extra and i == convs // 2 - 1:
            if extra == "LRN":
                nodes.append(helper.make_node("LRN", [cur], ["extra"], name="lrn_mid", size=3))
            elif extra == "InstanceNormalization":  # no emitter in the code generator
                inits += [
                    numpy_helper.from_array(np.ones(channels, np.float32), "in_s"),
                    numpy_helper.from_array(np.zeros(channels, np.float32), "in_b"),
                ]
                nodes.append(
                    helper.make_node(extra, [cur, "in_s", "in_b"], ["extra"], name="instnorm_mid")
                )
            elif extra == "Softmax":
                nodes.append(
                    helper.make_node("Softmax", [cur], ["extra"], name="softmax_mid", axis=1)
                )
            else:
                raise ValueError(extra)
            cur = "extra"
    inits += [_w("fc_w", (channels, 10), 50), _w("fc_b", (10,), 51)]
    nodes += [
        helper.make_node("GlobalAveragePool", [cur], ["gap"], name="gap"),
        helper.make_node("Flatten", ["gap"], ["flat"], name="flatten"),
        helper.make_node("Gemm", ["flat", "fc_w", "fc_b"], ["y"], name="fc"),
    ]
    g = helper.make_graph(
        nodes,
        "conv_net",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, channels, 12, 12])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 10])],
        inits,
    )
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    m.ir_version = 8
    onnx.checker.check_model(m)
    return m


def suite_doc(model_file: str, channels: int = 16, **entry: Any) -> dict[str, Any]:
    e = {
        "name": "net",
        "source": model_file,
        "inputs": {"x": {"shape": [1, channels, 12, 12], "dist": "normal", "seed": 0}},
        "checks": {"partitions": {"max": 1}, "tolerance": {"rtol": 1e-3, "atol": 1e-4}},
    }
    e.update(entry)
    return {
        "schema_version": 1,
        "suite": "doctor-test",
        "defaults": {"backends": ["bundled"], "target": "host", "threads": 1, "measure": MEASURE},
        "models": [e],
    }


def run_one(tmp: Path, tag: str, model: onnx.ModelProto, **entry: Any) -> dict[str, Any]:
    """One real `guard run` of a one-model suite in ``tmp/tag``; returns the results doc."""
    from guard.run.runner import RunOptions, run_suite

    d = tmp / tag
    d.mkdir(parents=True)
    onnx.save(model, str(d / "net.onnx"))
    (d / "suite.yaml").write_text(yaml.safe_dump(suite_doc("net.onnx", **entry)))
    doc, _ = run_suite(
        d / "suite.yaml", RunOptions(workdir=d, json_path=d / "results.json", track=False)
    )
    assert all(r["verdict"] != "error" for r in doc["results"]), doc["results"][0].get("error")
    return json.loads((d / "results.json").read_text())


def finding(doc: dict[str, Any], step: int, case: int = 0) -> dict[str, Any]:
    f = doc["cases"][case]["findings"][step - 1]
    assert f["step"] == step
    return f


def variant(doc: dict[str, Any], **changes: Any) -> dict[str, Any]:
    """A deep copy of a results doc with dotted-path changes applied to every result."""
    out = copy.deepcopy(doc)
    for r in out["results"]:
        for path, value in changes.items():
            cur = r
            parts = path.split(".")
            for p in parts[:-1]:
                cur = cur.setdefault(p, {})
            cur[parts[-1]] = value
    return out


def fake_sysfs(root: Path, caches: list[tuple[int, str, str, str]]) -> Path:
    """A sysfs cache tree: (level, type, size, shared_cpu_list) per index."""
    for i, (level, ctype, size, shared) in enumerate(caches):
        d = root / f"index{i}"
        d.mkdir(parents=True)
        (d / "level").write_text(f"{level}\n")
        (d / "type").write_text(f"{ctype}\n")
        (d / "size").write_text(f"{size}\n")
        (d / "shared_cpu_list").write_text(f"{shared}\n")
    return root
