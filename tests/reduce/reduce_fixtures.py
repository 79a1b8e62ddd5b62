"""A 50-node model, and a bundled backend with one miscompiled op (an executor hook)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import onnx
import yaml
from onnx import TensorProto, helper, numpy_helper

from guard.backends.bundled import ArtefactSession, BundledBackend
from guard.compiler.runtime.engine import reference_executor

MEASURE = {"warmup_s": 0.01, "min_iters": 5, "min_time_s": 0.02, "max_time_s": 1.0}


def fifty_node_model(width: int = 24, softmax: bool = True) -> onnx.ModelProto:
    """50 compute nodes: MatMul/Add/Tanh/Mul/Relu blocks with residual Adds, one Softmax
    (a Tanh in its place with ``softmax=False``)."""
    rng = np.random.default_rng(0)
    nodes, inits = [], []
    cur, skip = "x", "x"

    def const(name: str, shape: tuple[int, ...]) -> str:
        inits.append(
            numpy_helper.from_array((rng.standard_normal(shape) * 0.3).astype(np.float32), name)
        )
        return name

    i = 0
    while len(nodes) < 49:
        k = len(nodes)
        if k == 30 and softmax:
            nodes.append(helper.make_node("Softmax", [cur], [f"t{k}"], name="softmax", axis=-1))
        elif k == 30:
            nodes.append(helper.make_node("Tanh", [cur], [f"t{k}"], name="softmax_free"))
        elif i % 6 == 0:
            nodes.append(
                helper.make_node(
                    "MatMul", [cur, const(f"w{k}", (width, width))], [f"t{k}"], name=f"matmul{k}"
                )
            )
        elif i % 6 == 1:
            nodes.append(
                helper.make_node("Add", [cur, const(f"b{k}", (width,))], [f"t{k}"], name=f"bias{k}")
            )
        elif i % 6 == 2:
            nodes.append(helper.make_node("Tanh", [cur], [f"t{k}"], name=f"tanh{k}"))
        elif i % 6 == 3:
            nodes.append(
                helper.make_node("Mul", [cur, const(f"s{k}", (1,))], [f"t{k}"], name=f"scale{k}")
            )
        elif i % 6 == 4:
            nodes.append(helper.make_node("Relu", [cur], [f"t{k}"], name=f"relu{k}"))
        else:
            nodes.append(helper.make_node("Add", [cur, skip], [f"t{k}"], name=f"residual{k}"))
            skip = f"t{k}"
        cur = f"t{k}"
        i += 1
    nodes.append(helper.make_node("Sigmoid", [cur], ["y"], name="head"))
    g = helper.make_graph(
        nodes,
        "fifty",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, width])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, width])],
        inits,
    )
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    m.ir_version = 8
    onnx.checker.check_model(m)
    assert len(m.graph.node) == 50
    return m


def miscompiled(op: str) -> Any:
    """An executor that runs the reference kernels, except that ``op`` comes out wrong."""

    def execute(o: str, inputs: list[np.ndarray | None], attrs: dict[str, Any]) -> list[np.ndarray]:
        outs = reference_executor(o, inputs, attrs)
        if o == op:
            return [np.asarray(x) * 1.25 + 0.01 for x in outs]
        return outs

    return execute


class _Session:
    """A real bundled artefact whose native partitions run through an executor hook.

    The artefact's generated object is set aside (``native=None``) so that every native
    node runs through ``executors["native"]``: the reference kernels, with one op made
    wrong or slow. Plan, partitions, arena and weights are the real build's.
    """

    def __init__(self, art: Path, executors: dict[str, Any]) -> None:
        import dataclasses

        self._s = ArtefactSession(art)
        self._rt = dataclasses.replace(self._s.loaded, native=None).runtime(executors)
        self.input_names = self._s.input_names
        self.output_names = self._s.output_names

    def run(self, feeds: dict[str, np.ndarray]) -> list[np.ndarray]:
        out = self._rt.run(feeds)
        return [out[o] for o in self.output_names]

    def partitions(self) -> Any:
        return self._s.partitions()

    def memory(self) -> Any:
        return self._s.memory()


class MiscompilingBundled(BundledBackend):
    """The real bundled compiler and runtime; its native executor miscompiles one op."""

    def __init__(self, op: str) -> None:
        self.op = op

    def load(self, artefact_dir: Path, threads: int) -> _Session:  # type: ignore[override]
        return _Session(Path(artefact_dir), {"native": miscompiled(self.op)})


def write_suite(d: Path, model: onnx.ModelProto, **entry: Any) -> Path:
    d.mkdir(parents=True, exist_ok=True)
    onnx.save(model, str(d / "net.onnx"))
    shape = [int(x.dim_value) for x in model.graph.input[0].type.tensor_type.shape.dim]
    e = {
        "name": "net",
        "source": "net.onnx",
        "inputs": {model.graph.input[0].name: {"shape": shape, "dist": "normal", "seed": 0}},
        "checks": {"tolerance": {"rtol": 1e-4, "atol": 1e-5}},
    }
    e.update(entry)
    doc = {
        "schema_version": 1,
        "suite": "reduce-test",
        "defaults": {"backends": ["bundled"], "target": "host", "threads": 1, "measure": MEASURE},
        "models": [e],
    }
    (d / "suite.yaml").write_text(yaml.safe_dump(doc))
    return d / "suite.yaml"


def lrn_net(channels: int = 8, lrn: bool = True, op: str = "LRN") -> onnx.ModelProto:
    """x -> (Conv, Relu) x 4 with one ``op`` after the second Relu -> GlobalAveragePool.

    ``op`` is "LRN" (node ``lrn_mid``) or "InstanceNormalization" (node ``instnorm_mid``,
    an op the code generator has no emitter for); ``lrn=False`` is the same network
    without it (the base of a pair)."""
    rng = np.random.default_rng(1)
    nodes, inits, cur = [], [], "x"
    for i in range(4):
        inits += [
            numpy_helper.from_array(
                (rng.standard_normal((channels, channels, 3, 3)) * 0.2).astype(np.float32), f"w{i}"
            ),
            numpy_helper.from_array(np.zeros(channels, np.float32), f"b{i}"),
        ]
        nodes += [
            helper.make_node(
                "Conv", [cur, f"w{i}", f"b{i}"], [f"c{i}"], name=f"conv{i}", pads=[1, 1, 1, 1]
            ),
            helper.make_node("Relu", [f"c{i}"], [f"r{i}"], name=f"relu{i}"),
        ]
        cur = f"r{i}"
        if i == 1 and lrn and op == "LRN":
            nodes.append(helper.make_node("LRN", [cur], ["n"], name="lrn_mid", size=3))
            cur = "n"
        elif i == 1 and lrn:
            inits += [
                numpy_helper.from_array(np.ones(channels, np.float32), "in_scale"),
                numpy_helper.from_array(np.zeros(channels, np.float32), "in_bias"),
            ]
            nodes.append(
                helper.make_node(op, [cur, "in_scale", "in_bias"], ["n"], name="instnorm_mid")
            )
            cur = "n"
    nodes.append(helper.make_node("GlobalAveragePool", [cur], ["y"], name="gap"))
    g = helper.make_graph(
        nodes,
        "lrn_net",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, channels, 10, 10])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, channels, 1, 1])],
        inits,
    )
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    m.ir_version = 8
    onnx.checker.check_model(m)
    return m


# The native backend's own profile with LRN declined: what the code generator does for an op
# it has no emitter for ("no emitter for LRN"), shown here through a profile.
NATIVE_WITHOUT_LRN = {
    "schema_version": 1,
    "name": "native-no-lrn",
    "description": "native, declining LRN (an op without an emitter)",
    "ops": "*",
    "exclude_ops": ["LRN"],
    "dtypes": "*",
    "dynamic_shapes": False,
    "control_flow": False,
    "min_partition_size": 1,
    "boundary": {"bandwidth_gb_s": 10.0, "sync_us": 2.0},
}
