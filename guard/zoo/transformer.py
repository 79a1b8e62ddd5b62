"""``transformer`` and ``transformer_decomposed``: one BERT-style (post-LN) encoder layer.

    x[1, 128, 256]
    q, k, v = x @ Wq + bq, x @ Wk + bk, x @ Wv + bv          MatMul + Add each
    heads:  Reshape [1, 128, 4, 64] -> Transpose (k straight to [1, 4, 64, 128])
    probs = Softmax((q @ k^T) / 8, axis=-1);  ctx = probs @ v -> Transpose -> Reshape
    h1 = LayerNorm(ctx @ Wo + bo + x)                         residual Add
    h2 = LayerNorm(GELU(h1 @ W1 + b1) @ W2 + b2 + h1)         FFN 256 -> 1024 -> 256
    y[1, 128, 256] = h2

``transformer`` is opset 17 with the ``LayerNormalization`` op. ``transformer_decomposed``
is the same layer, the same weights, as torch.onnx (TorchScript exporter, opset < 17)
emits it, so a LayerNorm-recomposition pass has the real pattern to find
(torch/onnx/symbolic_opset9.py, ``native_layer_norm``), with axes = [-1]:

    mean = ReduceMean(x, axes=[-1])              keepdims=1, axes as attribute (opset < 18)
    d = Sub(x, mean)
    var = ReduceMean(Pow(d, Constant 2.0), axes=[-1])
    y = Add(Mul(Div(d, Sqrt(Add(var, Constant eps))), weight), bias)

Both use GELU in the exact (erf) form torch emits before opset 20 (``gelu`` in
symbolic_opset9.py): Mul(Mul(x, Add(Erf(Div(x, Constant sqrt2)), Constant 1)), Constant 0.5).
Scalars are ``Constant`` nodes, as the exporter leaves them; weights and Reshape shapes are
initializers. Both graphs compute the same function up to float32 rounding.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import onnx
from onnx import TensorProto, helper

from guard.zoo import _tensors as T

VERSION = "1"
SEQ, HIDDEN, HEADS, FFN = 128, 256, 4, 1024
HEAD_DIM = HIDDEN // HEADS
EPS = 1e-5
# Weights are drawn under this name for both variants, so both carry identical weights.
WEIGHT_SEED_NAME = "transformer"


class _Graph:
    """Accumulates nodes and initializers with unique, exporter-like names."""

    def __init__(self) -> None:
        self.nodes: list[onnx.NodeProto] = []
        self.inits: list[onnx.TensorProto] = []

    def op(self, op_type: str, inputs: list[str], name: str, **attrs: Any) -> str:
        out = f"{name}_output_0"
        self.nodes.append(helper.make_node(op_type, inputs, [out], name=name, **attrs))
        return out

    def const(self, name: str, value: float) -> str:
        """A float scalar as a Constant node (how the TorchScript exporter leaves scalars)."""
        tensor = helper.make_tensor(f"{name}_value", TensorProto.FLOAT, [], [value])
        return self.op("Constant", [], name, value=tensor)

    def param(self, name: str, values: np.ndarray) -> str:
        self.inits.append(T.initializer(name, values))
        return name

    def linear(self, x: str, prefix: str, fan_in: int, fan_out: int, std: float) -> str:
        w = self.param(
            f"{prefix}.weight", T.normal(WEIGHT_SEED_NAME, prefix + ".w", (fan_in, fan_out), std)
        )
        b = self.param(
            f"{prefix}.bias", T.normal(WEIGHT_SEED_NAME, prefix + ".b", (fan_out,), 0.02)
        )
        mm = self.op("MatMul", [x, w], f"/{prefix}/MatMul")
        return self.op("Add", [mm, b], f"/{prefix}/Add")


def _layer_norm(g: _Graph, x: str, prefix: str, decomposed: bool) -> str:
    scale = g.param(
        f"{prefix}.weight", T.normal(WEIGHT_SEED_NAME, prefix + ".w", (HIDDEN,), 0.05, mean=1.0)
    )
    bias = g.param(f"{prefix}.bias", T.normal(WEIGHT_SEED_NAME, prefix + ".b", (HIDDEN,), 0.05))
    p = f"/{prefix}"
    if not decomposed:
        return g.op(
            "LayerNormalization", [x, scale, bias], f"{p}/LayerNormalization", axis=-1, epsilon=EPS
        )
    mean = g.op("ReduceMean", [x], f"{p}/ReduceMean", axes=[-1])
    d = g.op("Sub", [x, mean], f"{p}/Sub")
    sq = g.op("Pow", [d, g.const(f"{p}/Constant", 2.0)], f"{p}/Pow")
    var = g.op("ReduceMean", [sq], f"{p}/ReduceMean_1", axes=[-1])
    var_eps = g.op("Add", [var, g.const(f"{p}/Constant_1", EPS)], f"{p}/Add")
    std = g.op("Sqrt", [var_eps], f"{p}/Sqrt")
    normed = g.op("Div", [d, std], f"{p}/Div")
    scaled = g.op("Mul", [normed, scale], f"{p}/Mul")
    return g.op("Add", [scaled, bias], f"{p}/Add_1")


def _gelu(g: _Graph, x: str, prefix: str) -> str:
    p = f"/{prefix}"
    div = g.op("Div", [x, g.const(f"{p}/Constant", 1.4142135623730951)], f"{p}/Div")
    erf = g.op("Erf", [div], f"{p}/Erf")
    plus1 = g.op("Add", [erf, g.const(f"{p}/Constant_1", 1.0)], f"{p}/Add")
    mul = g.op("Mul", [x, plus1], f"{p}/Mul")
    return g.op("Mul", [mul, g.const(f"{p}/Constant_2", 0.5)], f"{p}/Mul_1")


def _heads(g: _Graph, x: str, prefix: str, perm: list[int], shape: str) -> str:
    r = g.op("Reshape", [x, shape], f"/attn/{prefix}/Reshape")
    return g.op("Transpose", [r], f"/attn/{prefix}/Transpose", perm=perm)


def _build(name: str, opset: int, decomposed: bool) -> onnx.ModelProto:
    g = _Graph()
    split = g.param("onnx::Reshape_split", np.array([1, SEQ, HEADS, HEAD_DIM], np.int64))
    merge = g.param("onnx::Reshape_merge", np.array([1, SEQ, HIDDEN], np.int64))
    proj_std = 1.0 / np.sqrt(HIDDEN)  # q.k over 64 dims then / 8 keeps scores ~N(0, 1)
    q = _heads(g, g.linear("x", "attn/q_proj", HIDDEN, HIDDEN, proj_std), "q", [0, 2, 1, 3], split)
    k = _heads(g, g.linear("x", "attn/k_proj", HIDDEN, HIDDEN, proj_std), "k", [0, 2, 3, 1], split)
    v = _heads(g, g.linear("x", "attn/v_proj", HIDDEN, HIDDEN, proj_std), "v", [0, 2, 1, 3], split)
    scores = g.op("MatMul", [q, k], "/attn/MatMul")
    scaled = g.op("Div", [scores, g.const("/attn/Constant", float(np.sqrt(HEAD_DIM)))], "/attn/Div")
    probs = g.op("Softmax", [scaled], "/attn/Softmax", axis=-1)
    ctx = g.op("MatMul", [probs, v], "/attn/MatMul_1")
    ctx = g.op("Transpose", [ctx], "/attn/Transpose", perm=[0, 2, 1, 3])
    ctx = g.op("Reshape", [ctx, merge], "/attn/Reshape")
    attn = g.linear(ctx, "attn/out_proj", HIDDEN, HIDDEN, proj_std)
    h1 = _layer_norm(g, g.op("Add", [attn, "x"], "/Add"), "norm1", decomposed)
    up = g.linear(h1, "ffn/up", HIDDEN, FFN, T.he_std(HIDDEN))
    down = g.linear(_gelu(g, up, "ffn/gelu"), "ffn/down", FFN, HIDDEN, 1.0 / np.sqrt(FFN))
    h2 = _layer_norm(g, g.op("Add", [down, h1], "/Add_1"), "norm2", decomposed)
    assert g.nodes[-1].output[0] == h2
    g.nodes[-1].output[0] = "y"  # the graph output is the last LayerNorm's own output
    graph = helper.make_graph(
        g.nodes,
        name,
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, SEQ, HIDDEN])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, SEQ, HIDDEN])],
        g.inits,
    )
    model = helper.make_model(
        graph, opset_imports=[helper.make_opsetid("", opset)], ir_version=T.IR_FOR_OPSET[opset]
    )
    return T.finish(model, producer_version=VERSION)


def build() -> onnx.ModelProto:
    return _build("transformer", 17, decomposed=False)


def build_decomposed() -> onnx.ModelProto:
    return _build("transformer_decomposed", 16, decomposed=True)
