"""``inception_block``: one GoogLeNet "3a" inception block, on its own.

    x[1, 192, 28, 28] -+-> Conv1x1(64) -> Relu ------------------------------+
                       +-> Conv1x1(96) -> Relu -> Conv3x3(128, pad 1) -> Relu -+-> Concat
                       +-> Conv1x1(16) -> Relu -> Conv5x5(32, pad 2) -> Relu --+   axis 1
                       +-> MaxPool3x3(stride 1, pad 1) -> Conv1x1(32) -> Relu -+   -> y[1, 256, 28, 28]

One input fanning out to four branches and a channel Concat: the shape of graph where
concat elision, branch scheduling and memory planning (four live branches) matter.
"""

from __future__ import annotations

import onnx
from onnx import TensorProto, helper

from guard.zoo import _tensors as T

VERSION = "1"
NAME = "inception_block"
OPSET = 17
IN_CH, SIZE = 192, 28
# branch -> [(out channels, kernel)], as in GoogLeNet inception_3a
BRANCHES = {
    "b1x1": [(64, 1)],
    "b3x3": [(96, 1), (128, 3)],
    "b5x5": [(16, 1), (32, 5)],
    "pool": [(32, 1)],
}


def build() -> onnx.ModelProto:
    nodes, inits, outs = [], [], []
    for branch, convs in BRANCHES.items():
        x, ch = "x", IN_CH
        if branch == "pool":
            nodes.append(
                helper.make_node(
                    "MaxPool",
                    [x],
                    [f"{branch}/pool"],
                    name=f"{branch}/MaxPool",
                    kernel_shape=[3, 3],
                    strides=[1, 1],
                    pads=[1, 1, 1, 1],
                )
            )
            x = f"{branch}/pool"
        for i, (out_ch, k) in enumerate(convs):
            w, b = f"{branch}.conv{i}.weight", f"{branch}.conv{i}.bias"
            inits.append(
                T.initializer(w, T.normal(NAME, w, (out_ch, ch, k, k), T.he_std(ch * k * k)))
            )
            inits.append(T.initializer(b, T.normal(NAME, b, (out_ch,), 0.01)))
            pad = k // 2
            nodes.append(
                helper.make_node(
                    "Conv",
                    [x, w, b],
                    [f"{branch}/conv{i}"],
                    name=f"{branch}/Conv{i}",
                    kernel_shape=[k, k],
                    pads=[pad] * 4,
                )
            )
            nodes.append(
                helper.make_node(
                    "Relu", [f"{branch}/conv{i}"], [f"{branch}/relu{i}"], name=f"{branch}/Relu{i}"
                )
            )
            x, ch = f"{branch}/relu{i}", out_ch
        outs.append((x, ch))
    nodes.append(helper.make_node("Concat", [x for x, _ in outs], ["y"], name="Concat", axis=1))
    total = sum(ch for _, ch in outs)
    graph = helper.make_graph(
        nodes,
        NAME,
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, IN_CH, SIZE, SIZE])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, total, SIZE, SIZE])],
        inits,
    )
    model = helper.make_model(
        graph, opset_imports=[helper.make_opsetid("", OPSET)], ir_version=T.IR_FOR_OPSET[OPSET]
    )
    return T.finish(model, producer_version=VERSION)
