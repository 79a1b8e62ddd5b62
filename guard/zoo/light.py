"""The nine real topologies shipped in the onnx wheel, with their weights rehydrated.

``onnx/backend/test/data/light/light_*.onnx`` keep the real graphs (Caffe2-era exports:
opset 9, IR 3, every initializer also listed as a graph input) but replace each weight by a
``ConstantOfShape(<name>__SHAPE)`` node filled with 0.02; a few small tensors (some biases
and BatchNormalization statistics) are left real.

Rehydration, by the role each float tensor plays for the op that consumes it:

- Conv / Gemm weight: He normal, std = sqrt(2 / fan_in), fan_in = prod(shape[1:])
  (Conv [O, I/g, kh, kw]; Gemm with transB [out, in], also when reached through a Reshape).
- Conv / Gemm bias: N(0, 0.01^2).
- BatchNormalization: scale 1 + N(0, 0.05^2), bias N(0, 0.05^2), mean N(0, 0.05^2),
  var U(0.9, 1.1), so BN is close to identity and He scaling carries through.
- The affine after DenseNet/Inception-v2's BN (Unsqueeze -> Mul / Add): like BN scale / bias.

The few real tensors the file kept are regenerated too: real running statistics next to
random weights normalise nothing (DenseNet's kept conv1 variance goes down to 1.7e-12,
which would blow activations up by 10^6). Unused tensors are dropped; the integer Reshape
shapes (``OC2_DUMMY_*``) are kept as they are.

He scaling keeps activations finite but not the logits' size: residual sums grow them
(ResNet-50's logits come out with std ~2000, ShuffleNet's ~14000, a saturated softmax),
plain stacks shrink them (Inception-v1 ~0.18). So the head (the last Conv/Gemm before the
logits) is then scaled by a power of two that brings the logits' std, on one seeded N(0, 1)
input run by onnxruntime, nearest to 2. A power of two is exact in float32 and flips only
when the measured std sits on a rounding boundary, so the bytes stay reproducible even
though a runtime measured them.

The result: graph inputs are only the real data input, initializers are real tensors, the
IR version is 4 (the lowest that allows initializers which are not inputs, and the one that
shipped with opset 9); the opset stays 9.
"""

from __future__ import annotations

import functools
from collections import defaultdict
from collections.abc import Callable
from importlib import resources
from importlib.resources.abc import Traversable

import numpy as np
import onnx
from onnx import numpy_helper

from guard.core.errors import ModelError
from guard.zoo import _tensors as T

VERSION = "1"

# zoo name -> file stem in onnx/backend/test/data/light/
FILES = {
    "alexnet": "light_bvlc_alexnet",
    "densenet121": "light_densenet121",
    "inception_v1": "light_inception_v1",
    "inception_v2": "light_inception_v2",
    "resnet50": "light_resnet50",
    "shufflenet": "light_shufflenet",
    "squeezenet": "light_squeezenet",
    "vgg19": "light_vgg19",
    "zfnet512": "light_zfnet512",
}


def shipped_path(name: str) -> Traversable:
    """Path of the shipped, weight-stubbed file for zoo model ``name``."""
    return resources.files("onnx") / "backend" / "test" / "data" / "light" / f"{FILES[name]}.onnx"


def load_shipped(name: str) -> onnx.ModelProto:
    path = shipped_path(name)
    if not path.is_file():
        raise ModelError(
            f"the onnx wheel has no {FILES[name]}.onnx",
            where=f"zoo:{name}",
            hint=f"reinstall the pinned onnx ({onnx.__version__}) wheel, which ships it under {path}",
        )
    return onnx.load_from_string(path.read_bytes())


def _role(graph: onnx.GraphProto, tensor: str, consumers: dict) -> tuple[str, dict]:
    """What ``tensor`` is for: ('conv_w' | 'gemm_w' | 'bias' | 'bn_scale' | ..., details)."""
    uses = consumers.get(tensor, [])
    if not uses:
        return "unused", {}
    node, index = uses[0]
    op = node.op_type
    if op == "Reshape" and index == 0:
        return _role(graph, node.output[0], consumers)
    if op == "Unsqueeze":
        after = {n.op_type for n, _ in consumers.get(node.output[0], [])}
        if after == {"Mul"}:
            return "bn_scale", {}
        if after == {"Add"}:
            return "bn_bias", {}
    if op == "Conv":
        return ("conv_w" if index == 1 else "bias"), {}
    if op == "Gemm":
        attrs = {a.name: onnx.helper.get_attribute_value(a) for a in node.attribute}
        return ("gemm_w" if index == 1 else "bias"), {"trans_b": bool(attrs.get("transB", 0))}
    if op == "BatchNormalization" and 1 <= index <= 4:
        return ("bn_scale", "bn_bias", "bn_mean", "bn_var")[index - 1], {}
    return "unknown", {"op": op, "index": index}


def _values(model: str, tensor: str, shape: tuple[int, ...], role: str, info: dict) -> np.ndarray:
    if role == "conv_w":
        return T.normal(model, tensor, shape, T.he_std(int(np.prod(shape[1:]))))
    if role == "gemm_w":
        fan_in = int(np.prod(shape[1:])) if info["trans_b"] else shape[0]
        return T.normal(model, tensor, shape, T.he_std(fan_in))
    if role == "bias":
        return T.normal(model, tensor, shape, 0.01)
    if role == "bn_scale":
        return T.normal(model, tensor, shape, 0.05, mean=1.0)
    if role in ("bn_bias", "bn_mean"):
        return T.normal(model, tensor, shape, 0.05)
    if role == "bn_var":
        return T.uniform(model, tensor, shape, 0.9, 1.1)
    raise ModelError(
        f"cannot tell what float tensor {tensor!r} is for ({info})",
        where=f"zoo:{model}",
        hint="teach guard/zoo/light.py this role",
    )


def rehydrate(name: str, shipped: onnx.ModelProto) -> onnx.ModelProto:
    """Replace the ConstantOfShape stubs of a shipped light model by seeded initializers."""
    graph = shipped.graph
    inits = {t.name: t for t in graph.initializer}
    consumers: dict[str, list] = defaultdict(list)
    for node in graph.node:
        for index, value in enumerate(node.input):
            consumers[value].append((node, index))

    stubs: dict[str, tuple[int, ...]] = {}  # weight name -> shape, for every stub
    kept_nodes = []
    for node in graph.node:
        if node.op_type == "ConstantOfShape" and node.input[0] in inits:
            stubs[node.output[0]] = tuple(
                int(d) for d in numpy_helper.to_array(inits[node.input[0]])
            )
        else:
            kept_nodes.append(node)
    for t in graph.initializer:  # the real float tensors the file kept: regenerated too
        if t.data_type == onnx.TensorProto.FLOAT and t.name in consumers:
            stubs[t.name] = tuple(t.dims)

    used = {value for node in kept_nodes for value in node.input}
    new_inits = []
    for tensor, shape in sorted(stubs.items()):
        if tensor not in used:
            continue
        role, info = _role(graph, tensor, consumers)
        new_inits.append(T.initializer(tensor, _values(name, tensor, shape, role, info)))
    for t in graph.initializer:  # integer constants (Reshape shapes) stay as shipped
        if t.name in used and t.name not in stubs:
            new_inits.append(t)

    init_names = {t.name for t in new_inits}
    out = onnx.helper.make_graph(
        kept_nodes,
        graph.name,
        [i for i in graph.input if i.name not in init_names and i.name in used],
        list(graph.output),
        new_inits,
    )
    model = onnx.helper.make_model(
        out, opset_imports=list(shipped.opset_import), ir_version=T.IR_FOR_OPSET[9]
    )
    return model


LOGITS_STD = 2.0
# Ops between the head and the logits that are positively homogeneous (f(c*x) = c*f(x) for
# c > 0), so scaling the head's weight and bias by c scales the logits by c.
_HOMOGENEOUS = {
    "Relu",
    "GlobalAveragePool",
    "AveragePool",
    "MaxPool",
    "Reshape",
    "Flatten",
    "Dropout",
}


def _head(graph: onnx.GraphProto) -> tuple[str, onnx.NodeProto]:
    """(logits tensor, the Conv/Gemm whose weight and bias set their scale)."""
    softmax = [
        n for n in graph.node if n.op_type == "Softmax" and n.output[0] == graph.output[0].name
    ]
    logits = softmax[0].input[0] if softmax else graph.output[0].name
    producer = {out: n for n in graph.node for out in n.output}
    node = producer[logits]
    while node.op_type not in ("Conv", "Gemm"):
        if node.op_type not in _HOMOGENEOUS:
            raise ModelError(
                f"cannot scale logits through {node.op_type} node {node.name!r}",
                where=graph.name,
                hint="extend _HOMOGENEOUS in guard/zoo/light.py",
            )
        node = producer[node.input[0]]
    return logits, node


def calibrate_head(name: str, model: onnx.ModelProto) -> onnx.ModelProto:
    """Scale the head by the power of two that brings the logits' std nearest LOGITS_STD."""
    import onnxruntime as ort  # heavy; only builders of real topologies need it

    graph = model.graph
    logits, head = _head(graph)
    extra = logits != graph.output[0].name
    if extra:  # expose the logits for the probe only; removed again below
        graph.output.append(
            onnx.helper.make_tensor_value_info(logits, onnx.TensorProto.FLOAT, None)
        )
    options = ort.SessionOptions()
    options.intra_op_num_threads = 1
    # No graph rewrites: the probe is only run once, and folding VGG's 575 MB costs seconds.
    options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    session = ort.InferenceSession(
        model.SerializeToString(), options, providers=["CPUExecutionProvider"]
    )
    if extra:
        graph.output.pop()
    data = graph.input[0]
    shape = tuple(d.dim_value for d in data.type.tensor_type.shape.dim)
    x = T.rng_for(name, "calibration-input").standard_normal(shape, dtype=np.float32)
    std = float(np.std(session.run([logits], {data.name: x})[0], dtype=np.float64))
    if not np.isfinite(std) or std == 0.0:
        raise ModelError(
            f"logits are degenerate (std {std}) after rehydration",
            where=f"zoo:{name}",
            hint="fix the initial scales in guard/zoo/light.py",
        )
    scale = np.float32(2.0 ** round(float(np.log2(LOGITS_STD / std))))
    params = {t.name: t for t in graph.initializer}
    producer = {out: n for n in graph.node for out in n.output}
    for tensor in head.input[1:]:
        if tensor not in params and producer[tensor].op_type == "Reshape":
            tensor = producer[tensor].input[0]  # Inception-v1 reshapes its classifier weight
        values = numpy_helper.to_array(params[tensor]) * scale
        params[tensor].CopyFrom(T.initializer(tensor, values))
    return model


def builder(name: str) -> Callable[[], onnx.ModelProto]:
    def build() -> onnx.ModelProto:
        model = calibrate_head(name, rehydrate(name, load_shipped(name)))
        return T.finish(model, producer_version=VERSION)

    return build


@functools.cache
def signature(name: str) -> tuple[dict[str, list[int | str]], dict[str, list[int | str]]]:
    """(inputs, outputs) of the rehydrated model, read from the small shipped file."""
    graph = load_shipped(name).graph
    inits = {t.name for t in graph.initializer}

    def dims(value: onnx.ValueInfoProto) -> list[int | str]:
        return [d.dim_param or d.dim_value for d in value.type.tensor_type.shape.dim]

    inputs = {i.name: dims(i) for i in graph.input if i.name not in inits}
    return inputs, {o.name: dims(o) for o in graph.output}  # callers copy before handing out
