"""``mlp``: a small multilayer perceptron with a dynamic batch, in both dense-layer forms.

x[N, 256] -> Gemm(256->512) -> Relu -> MatMul(512->512) + Add -> Relu
          -> MatMul(512->256) + Add -> Relu -> Gemm(256->10) -> logits[N, 10]

Both spellings of a dense layer appear (Gemm, and MatMul + Add as exporters emit for
3-D-capable linear layers), so MatMul+Add -> Gemm fusion has something to do.
"""

from __future__ import annotations

import onnx
from onnx import TensorProto, helper

from guard.zoo import _tensors as T

VERSION = "1"
NAME = "mlp"
OPSET = 17
WIDTHS = (256, 512, 512, 256, 10)
# Layer i is a Gemm when True, MatMul + Add when False.
USE_GEMM = (True, False, False, True)


def build() -> onnx.ModelProto:
    nodes, inits = [], []
    x = "x"
    for i, (fan_in, fan_out) in enumerate(zip(WIDTHS[:-1], WIDTHS[1:], strict=True)):
        w, b = f"fc{i}.weight", f"fc{i}.bias"
        last = i == len(WIDTHS) - 2
        out = "logits" if last else f"fc{i}"
        if USE_GEMM[i]:  # torch.nn.Linear layout: weight [out, in], transB=1
            inits.append(T.initializer(w, T.normal(NAME, w, (fan_out, fan_in), T.he_std(fan_in))))
            inits.append(T.initializer(b, T.normal(NAME, b, (fan_out,), 0.01)))
            nodes.append(helper.make_node("Gemm", [x, w, b], [out], name=f"fc{i}/Gemm", transB=1))
        else:
            inits.append(T.initializer(w, T.normal(NAME, w, (fan_in, fan_out), T.he_std(fan_in))))
            inits.append(T.initializer(b, T.normal(NAME, b, (fan_out,), 0.01)))
            nodes.append(helper.make_node("MatMul", [x, w], [f"fc{i}/mm"], name=f"fc{i}/MatMul"))
            nodes.append(helper.make_node("Add", [f"fc{i}/mm", b], [out], name=f"fc{i}/Add"))
        if not last:
            nodes.append(helper.make_node("Relu", [out], [f"relu{i}"], name=f"relu{i}"))
            x = f"relu{i}"
    graph = helper.make_graph(
        nodes,
        NAME,
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", WIDTHS[0]])],
        [helper.make_tensor_value_info("logits", TensorProto.FLOAT, ["N", WIDTHS[-1]])],
        inits,
    )
    model = helper.make_model(
        graph, opset_imports=[helper.make_opsetid("", OPSET)], ir_version=T.IR_FOR_OPSET[OPSET]
    )
    return T.finish(model, producer_version=VERSION)
