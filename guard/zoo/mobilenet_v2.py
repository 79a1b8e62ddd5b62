"""``mobilenet_v2``: MobileNetV2 (width 1.0, 224x224), built by code with seeded weights.

    x[1,3,224,224] -> Conv3x3 s2 (32) -> BN -> ReLU6
      -> 17 inverted residual blocks (1x1 expand x t, BN, ReLU6; 3x3 depthwise, BN, ReLU6;
         1x1 project, BN; + the block input when stride 1 and channels match)
      -> Conv1x1 (1280) -> BN -> ReLU6 -> GlobalAveragePool -> Flatten -> Gemm -> y[1,1000]

The block table (t expansion, c channels, n repeats, s first stride) is the paper's
(Sandler et al., 2018). Its first stages hold the largest feature maps (96 x 112 x 112
after the second block's expansion): the model where patch-based tiling of the first
stages matters (MCUNetV2), and the one the budget ladder's tiling rung is measured on.
"""

from __future__ import annotations

import numpy as np
import onnx
from onnx import TensorProto, helper

from guard.zoo import _tensors as T

VERSION = "1"
NAME = "mobilenet_v2"
OPSET = 17
SIZE = 224
CLASSES = 1000
# (expansion t, output channels c, repeats n, first stride s)
BLOCKS = [(1, 16, 1, 1), (6, 24, 2, 2), (6, 32, 3, 2), (6, 64, 4, 2), (6, 96, 3, 1),
          (6, 160, 3, 2), (6, 320, 1, 1)]  # fmt: skip


class _Builder:
    def __init__(self) -> None:
        self.nodes: list[onnx.NodeProto] = []
        self.inits: list[onnx.TensorProto] = [
            T.initializer("relu6.min", np.array(0.0, np.float32)),
            T.initializer("relu6.max", np.array(6.0, np.float32)),
        ]

    def conv_bn(
        self, x: str, cin: int, cout: int, k: int, stride: int, groups: int, name: str, act: bool
    ) -> str:
        w = f"{name}.weight"
        fan_in = cin // groups * k * k
        self.inits.append(
            T.initializer(w, T.normal(NAME, w, (cout, cin // groups, k, k), T.he_std(fan_in)))
        )
        self.nodes.append(
            helper.make_node(
                "Conv", [x, w], [f"{name}/conv"], name=f"{name}/Conv", kernel_shape=[k, k],
                strides=[stride, stride], pads=[k // 2] * 4, group=groups,
            )
        )  # fmt: skip
        bn = [f"{name}.bn.{p}" for p in ("scale", "bias", "mean", "var")]
        self.inits += [
            T.initializer(bn[0], T.uniform(NAME, bn[0], (cout,), 0.5, 1.5)),
            T.initializer(bn[1], T.normal(NAME, bn[1], (cout,), 0.1)),
            T.initializer(bn[2], T.normal(NAME, bn[2], (cout,), 0.1)),
            T.initializer(bn[3], T.uniform(NAME, bn[3], (cout,), 0.5, 1.5)),
        ]
        self.nodes.append(
            helper.make_node(
                "BatchNormalization", [f"{name}/conv", *bn], [f"{name}/bn"], name=f"{name}/BN"
            )
        )
        if not act:
            return f"{name}/bn"
        self.nodes.append(
            helper.make_node(
                "Clip", [f"{name}/bn", "relu6.min", "relu6.max"], [f"{name}/relu6"],
                name=f"{name}/ReLU6",
            )
        )  # fmt: skip
        return f"{name}/relu6"


def build() -> onnx.ModelProto:
    b = _Builder()
    x = b.conv_bn("x", 3, 32, 3, 2, 1, "stem", act=True)
    cin, idx = 32, 0
    for t, c, n, s in BLOCKS:
        for r in range(n):
            stride = s if r == 0 else 1
            name = f"block{idx}"
            h = x
            if t != 1:
                h = b.conv_bn(h, cin, cin * t, 1, 1, 1, f"{name}.expand", act=True)
            h = b.conv_bn(h, cin * t, cin * t, 3, stride, cin * t, f"{name}.dw", act=True)
            h = b.conv_bn(h, cin * t, c, 1, 1, 1, f"{name}.project", act=False)
            if stride == 1 and cin == c:
                b.nodes.append(helper.make_node("Add", [x, h], [f"{name}/add"], name=f"{name}/Add"))
                h = f"{name}/add"
            x, cin, idx = h, c, idx + 1
    x = b.conv_bn(x, cin, 1280, 1, 1, 1, "head", act=True)
    b.nodes.append(helper.make_node("GlobalAveragePool", [x], ["pool"], name="GlobalAveragePool"))
    b.nodes.append(helper.make_node("Flatten", ["pool"], ["flat"], name="Flatten", axis=1))
    w, bias = "classifier.weight", "classifier.bias"
    b.inits.append(T.initializer(w, T.normal(NAME, w, (CLASSES, 1280), T.he_std(1280) / 4)))
    b.inits.append(T.initializer(bias, np.zeros(CLASSES, np.float32)))
    b.nodes.append(helper.make_node("Gemm", ["flat", w, bias], ["y"], name="Gemm", transB=1))
    graph = helper.make_graph(
        b.nodes,
        NAME,
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, SIZE, SIZE])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, CLASSES])],
        b.inits,
    )
    model = helper.make_model(
        graph, opset_imports=[helper.make_opsetid("", OPSET)], ir_version=T.IR_FOR_OPSET[OPSET]
    )
    return T.finish(model, producer_version=VERSION)
