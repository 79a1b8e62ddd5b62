"""Fixtures for the zoo tests.

``zoo_dir``: one cache directory for the whole session, so each model is built once and
shared by the structural, runtime and determinism tests. ``built(name)`` returns its path.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest

import guard.zoo as zoo


@pytest.fixture(scope="session")
def zoo_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("zoo-cache")


@pytest.fixture(scope="session")
def built(zoo_dir: Path) -> Callable[[str], Path]:
    return lambda name: zoo.model_path(name, zoo_dir)
