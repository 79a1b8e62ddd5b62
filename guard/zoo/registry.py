"""The zoo's registry: one explicit entry per model, and the lookups over it."""

from __future__ import annotations

import difflib
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
import onnx

from guard.core.errors import UsageError
from guard.zoo import digits, inception_block, light, mlp, mobilenet_v2, transformer

Dims = list[int | str]
Signature = tuple[dict[str, Dims], dict[str, Dims]]


@dataclass(frozen=True)
class ZooModel:
    """How to build one zoo model, and what it looks like without building it."""

    name: str
    description: str
    build: Callable[[], onnx.ModelProto]
    version: str  # bump when the builder's output changes: it is part of the cache key
    opset: int
    signature: Callable[[], Signature]  # (inputs, outputs): name -> dims, symbolic as str
    dataset: str | None = None  # "zoo:<name>" of the held-out set, for classifiers
    # Packages whose versions can change the bytes, besides onnx and numpy (cache key).
    depends: tuple[str, ...] = ()


def _fixed(inputs: dict[str, Dims], outputs: dict[str, Dims]) -> Callable[[], Signature]:
    return lambda: (inputs, outputs)


_LIGHT_DESCRIPTIONS = {
    "alexnet": "AlexNet (BVLC): 5 Conv + LRN + 3 Gemm, 61M params, 224x224 softmax classifier",
    "densenet121": "DenseNet-121: 120 Conv+BN(+affine) blocks with dense Concat, logits [1,1000,1,1]",
    "inception_v1": "Inception-v1 (GoogLeNet): 9 inception blocks, LRN, 224x224 softmax classifier",
    "inception_v2": "Inception-v2 (BN-Inception): 69 Conv+BN(+affine), 224x224 softmax classifier",
    "resnet50": "ResNet-50: 53 Conv+BN, 16 residual Sum blocks, 224x224 softmax classifier",
    "shufflenet": "ShuffleNet: grouped Conv+BN, channel shuffle (Reshape/Transpose), softmax classifier",
    "squeezenet": "SqueezeNet 1.0: fire modules (1x1 squeeze, 1x1/3x3 expand, Concat), softmax [1,1000,1,1]",
    "vgg19": "VGG-19: 16 Conv + 3 Gemm, 144M params, 224x224 softmax classifier",
    "zfnet512": "ZFNet-512: 5 Conv + LRN + 3 Gemm, 224x224 softmax classifier",
}


def _light(name: str) -> ZooModel:
    return ZooModel(
        name=name,
        description=_LIGHT_DESCRIPTIONS[name]
        + " (real topology from the onnx wheel, seeded random weights)",
        build=light.builder(name),
        version=light.VERSION,
        opset=9,
        signature=lambda: light.signature(name),
        depends=("onnxruntime",),  # the head is scaled by a runtime measurement
    )


REGISTRY: dict[str, ZooModel] = {
    **{name: _light(name) for name in sorted(light.FILES)},
    "mlp": ZooModel(
        name="mlp",
        description="MLP 256-512-512-256-10 mixing Gemm and MatMul+Add layers, Relu, dynamic batch N",
        build=mlp.build,
        version=mlp.VERSION,
        opset=mlp.OPSET,
        signature=_fixed({"x": ["N", mlp.WIDTHS[0]]}, {"logits": ["N", mlp.WIDTHS[-1]]}),
    ),
    "transformer": ZooModel(
        name="transformer",
        description="one post-LN transformer encoder layer (seq 128, hidden 256, 4 heads, FFN 1024), "
        "LayerNormalization op, erf GELU",
        build=transformer.build,
        version=transformer.VERSION,
        opset=17,
        signature=_fixed(
            {"x": [1, transformer.SEQ, transformer.HIDDEN]},
            {"y": [1, transformer.SEQ, transformer.HIDDEN]},
        ),
    ),
    "transformer_decomposed": ZooModel(
        name="transformer_decomposed",
        description="the transformer layer as torch.onnx emits it at opset 16: LayerNorm as "
        "ReduceMean/Sub/Pow/ReduceMean/Add/Sqrt/Div/Mul/Add, erf GELU",
        build=transformer.build_decomposed,
        version=transformer.VERSION,
        opset=16,
        signature=_fixed(
            {"x": [1, transformer.SEQ, transformer.HIDDEN]},
            {"y": [1, transformer.SEQ, transformer.HIDDEN]},
        ),
    ),
    "inception_block": ZooModel(
        name="inception_block",
        description="one GoogLeNet 3a inception block: 1x1 / 1x1-3x3 / 1x1-5x5 / maxpool-1x1 "
        "branches, Relu, channel Concat",
        build=inception_block.build,
        version=inception_block.VERSION,
        opset=inception_block.OPSET,
        signature=_fixed(
            {"x": [1, inception_block.IN_CH, inception_block.SIZE, inception_block.SIZE]},
            {"y": [1, 256, inception_block.SIZE, inception_block.SIZE]},
        ),
    ),
    "mobilenet_v2": ZooModel(
        name="mobilenet_v2",
        description="MobileNetV2 (width 1.0, 224x224): 17 inverted residual blocks (1x1 expand, "
        "3x3 depthwise, 1x1 project, BN, ReLU6 as Clip), 1000-class Gemm head",
        build=mobilenet_v2.build,
        version=mobilenet_v2.VERSION,
        opset=mobilenet_v2.OPSET,
        signature=_fixed(
            {"x": [1, 3, mobilenet_v2.SIZE, mobilenet_v2.SIZE]}, {"y": [1, mobilenet_v2.CLASSES]}
        ),
    ),
    "digits": ZooModel(
        name="digits",
        description="8x8 digit classifier (64-32-10 MLP: Gemm/Relu/Gemm/Softmax) trained at build "
        "time on scikit-learn digits; takes raw pixels 0..16, scaling folded into the first Gemm",
        build=digits.build,
        version=digits.VERSION,
        opset=digits.OPSET,
        signature=_fixed({"x": ["N", 64]}, {"probs": ["N", 10]}),
        dataset=f"zoo:{digits.DATASET}",
        depends=("scikit-learn",),  # the training data
    ),
}

Loader = Callable[[], tuple[np.ndarray, np.ndarray]]  # a data set: (samples, labels)
DATASETS: dict[str, Loader] = {digits.DATASET: digits.test_split}


def strip_prefix(name: str) -> str:
    return name[len("zoo:") :] if name.startswith("zoo:") else name


def _unknown(kind: str, name: str, known: list[str]) -> UsageError:
    close = difflib.get_close_matches(name, known, n=1)
    suggestion = f"Did you mean {close[0]!r}? " if close else ""
    return UsageError(
        f"unknown zoo {kind} {name!r}.",
        where=f"zoo:{name}",
        hint=f"{suggestion}Known {kind}s: {', '.join(sorted(known))}.",
    )


def spec(name: str) -> ZooModel:
    """The spec for ``name`` (with or without ``zoo:``); UsageError with a suggestion if unknown."""
    bare = strip_prefix(name)
    if bare not in REGISTRY:
        raise _unknown("model", bare, list(REGISTRY))
    return REGISTRY[bare]


def dataset_loader(name: str) -> Loader:
    bare = strip_prefix(name)
    if bare not in DATASETS:
        raise _unknown("dataset", bare, list(DATASETS))
    return DATASETS[bare]
