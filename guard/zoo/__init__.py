"""guard.zoo: models built by code, deterministically, and cached on disk.

    list_models() -> list[str]
    model_path(name, cache_dir=None) -> Path      builds once, then reads the cache
    describe(name) -> dict                        without building
    list_datasets() -> list[str]
    load_dataset(name) -> (X, y)                  e.g. "digits-test"

Names may carry the ``zoo:`` prefix suites use (``zoo:resnet50``, ``zoo:digits-test``).
"""

from __future__ import annotations

import numpy as np

from guard.zoo.cache import default_cache_dir, model_path
from guard.zoo.registry import DATASETS, REGISTRY, dataset_loader, spec

__all__ = [
    "default_cache_dir",
    "describe",
    "list_datasets",
    "list_models",
    "load_dataset",
    "model_path",
]


def list_models() -> list[str]:
    """Every zoo model name, sorted."""
    return sorted(REGISTRY)


def describe(name: str) -> dict:
    """What a zoo model is, without building it.

    Keys: name, description, opset, inputs and outputs (name -> dims, a symbolic dim as its
    name, e.g. ``["N", 64]``), dataset (``"zoo:digits-test"`` for classifiers trained on a
    zoo data set, else None) and version (the builder's).
    """
    model = spec(name)
    inputs, outputs = model.signature()
    return {
        "name": model.name,
        "description": model.description,
        "opset": model.opset,
        "inputs": {k: list(v) for k, v in inputs.items()},
        "outputs": {k: list(v) for k, v in outputs.items()},
        "dataset": model.dataset,
        "version": model.version,
    }


def list_datasets() -> list[str]:
    """Every zoo data set name (use as ``zoo:<name>`` in a suite), sorted."""
    return sorted(DATASETS)


def load_dataset(name: str) -> tuple[np.ndarray, np.ndarray]:
    """(X, y) of a zoo data set: X float32 shaped as its model's input, y int64 labels."""
    x, y = dataset_loader(name)()
    return x, y
