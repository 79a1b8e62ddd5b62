"""``digits``: a small classifier trained at build time on scikit-learn's bundled digits.

Data: ``sklearn.datasets.load_digits`` (1797 8x8 images, pixel values 0..16, offline).
Split: a fixed permutation (numpy PCG64, seed 0) holds out 20% (360 images) as
``digits-test``; the model never sees them.

Model: 64 -> 32 -> 10 MLP, trained by full-batch Adam on softmax cross-entropy with a small
L2 penalty, in float64 numpy from a fixed seed: no minibatch order, no threads that race,
so the same machine gives the same weights, bit for bit, every time.

Scaling lives in the graph, folded into the first Gemm: the network was trained on
standardised pixels z = (x - mu) / sd, and z @ W1 + b1 = x @ (W1 / sd) + (b1 - (mu / sd) @ W1),
so the exported graph is exactly Gemm -> Relu -> Gemm -> Softmax and takes raw pixel
values (0..16) as float32 [N, 64]. ``load_dataset("digits-test")`` returns raw pixels too.
"""

from __future__ import annotations

import functools

import numpy as np
import onnx
from onnx import TensorProto, helper

from guard.zoo import _tensors as T

VERSION = "1"
NAME = "digits"
DATASET = "digits-test"
OPSET = 17
HIDDEN = 32
TEST_FRACTION = 0.2
SPLIT_SEED = 0
STEPS, LEARNING_RATE, L2 = 300, 0.01, 1e-4


@functools.cache
def _split() -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """(x_train, y_train, x_test, y_test): float64 raw pixels, int64 labels."""
    from sklearn.datasets import load_digits  # heavy import, needed only here

    x, y = load_digits(return_X_y=True)
    order = np.random.default_rng(SPLIT_SEED).permutation(len(y))
    n_test = round(TEST_FRACTION * len(y))
    test, train = order[:n_test], order[n_test:]
    x = x.astype(np.float64)
    y = y.astype(np.int64)
    return x[train], y[train], x[test], y[test]


def test_split() -> tuple[np.ndarray, np.ndarray]:
    """The held-out split: X float32 [360, 64] raw pixels (0..16), y int64 [360]."""
    _, _, x, y = _split()
    return x.astype(np.float32), y.copy()


def _train() -> dict[str, np.ndarray]:
    """Full-batch Adam in float64; returns float64 weights on standardised inputs."""
    x, y, _, _ = _split()
    mu = x.mean(axis=0)
    sd = x.std(axis=0)
    sd[sd == 0] = 1.0  # pixels that are always 0 in the training set
    z = (x - mu) / sd
    onehot = np.eye(10)[y]
    rng = np.random.default_rng(1)
    params = {
        "w1": rng.standard_normal((64, HIDDEN)) * np.sqrt(2.0 / 64),
        "b1": np.zeros(HIDDEN),
        "w2": rng.standard_normal((HIDDEN, 10)) * np.sqrt(1.0 / HIDDEN),
        "b2": np.zeros(10),
    }
    m = {k: np.zeros_like(v) for k, v in params.items()}
    v = {k: np.zeros_like(v) for k, v in params.items()}
    beta1, beta2, eps = 0.9, 0.999, 1e-8
    for step in range(1, STEPS + 1):
        h_pre = z @ params["w1"] + params["b1"]
        h = np.maximum(h_pre, 0.0)
        logits = h @ params["w2"] + params["b2"]
        logits -= logits.max(axis=1, keepdims=True)
        p = np.exp(logits)
        p /= p.sum(axis=1, keepdims=True)
        g_logits = (p - onehot) / len(y)
        grads = {
            "w2": h.T @ g_logits + L2 * params["w2"],
            "b2": g_logits.sum(axis=0),
        }
        g_h = (g_logits @ params["w2"].T) * (h_pre > 0)
        grads["w1"] = z.T @ g_h + L2 * params["w1"]
        grads["b1"] = g_h.sum(axis=0)
        for k in params:
            m[k] = beta1 * m[k] + (1 - beta1) * grads[k]
            v[k] = beta2 * v[k] + (1 - beta2) * grads[k] ** 2
            m_hat = m[k] / (1 - beta1**step)
            v_hat = v[k] / (1 - beta2**step)
            params[k] = params[k] - LEARNING_RATE * m_hat / (np.sqrt(v_hat) + eps)
    # Fold the standardisation into the first layer (see the module docstring).
    params["b1"] = params["b1"] - (mu / sd) @ params["w1"]
    params["w1"] = params["w1"] / sd[:, None]
    return params


def build() -> onnx.ModelProto:
    p = {k: val.astype(np.float32) for k, val in _train().items()}
    nodes = [
        helper.make_node("Gemm", ["x", "fc1.weight", "fc1.bias"], ["h"], name="fc1/Gemm"),
        helper.make_node("Relu", ["h"], ["h_relu"], name="relu"),
        helper.make_node("Gemm", ["h_relu", "fc2.weight", "fc2.bias"], ["logits"], name="fc2/Gemm"),
        helper.make_node("Softmax", ["logits"], ["probs"], name="softmax", axis=-1),
    ]
    inits = [
        T.initializer("fc1.weight", p["w1"]),
        T.initializer("fc1.bias", p["b1"]),
        T.initializer("fc2.weight", p["w2"]),
        T.initializer("fc2.bias", p["b2"]),
    ]
    graph = helper.make_graph(
        nodes,
        NAME,
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", 64])],
        [helper.make_tensor_value_info("probs", TensorProto.FLOAT, ["N", 10])],
        inits,
    )
    model = helper.make_model(
        graph, opset_imports=[helper.make_opsetid("", OPSET)], ir_version=T.IR_FOR_OPSET[OPSET]
    )
    return T.finish(model, producer_version=VERSION)
