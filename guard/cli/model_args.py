"""The model argument that ``guard fit`` and ``guard partition`` share: an .onnx path or
``zoo:<name>``, and ``--input NAME=D0,D1,..`` to bind an input's shape."""

from __future__ import annotations

import argparse
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from guard.core.errors import ModelError, UnboundInputError, UsageError


def add_model_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("model", help="an .onnx file or zoo:<name>")
    p.add_argument(
        "--input", action="append", metavar="NAME=D0,D1,..", help="bind an input's shape"
    )


def input_shapes(items: list[str] | None) -> dict[str, tuple[int, ...]]:
    """``--input`` values as {name: shape}; a malformed one is a usage error."""
    shapes: dict[str, tuple[int, ...]] = {}
    for item in items or ():
        name, sep, dims = item.partition("=")
        try:
            if not (name and sep):
                raise ValueError(item)
            shapes[name] = tuple(int(d) for d in dims.split(",") if d)
        except ValueError:
            raise UsageError(f"--input {item!r}: expected NAME=D0,D1,...") from None
    return shapes


def model_file(model: str) -> Path:
    """The .onnx file behind ``model`` (a path or ``zoo:<name>``); missing: a usage error."""
    path = model
    if model.startswith("zoo:"):
        from guard import zoo

        path = str(zoo.model_path(model[4:]))
    if not Path(path).is_file():
        raise UsageError(f"{path}: no such model file", hint="Give an .onnx path or zoo:<name>.")
    return Path(path)


@contextmanager
def bound_by_flag(shown: str) -> Iterator[None]:
    """An unbound input inside says how to bind it here: ``--input NAME=D0,D1``, not the
    suite's ``inputs:`` key, naming the model as the user wrote it."""
    try:
        yield
    except UnboundInputError as exc:
        dims = ",".join(str(d) for d in exc.example) if exc.example else "D0,D1,.."
        raise ModelError(
            exc.bare, where=shown, hint=f"Bind it with --input {exc.input_name}={dims}."
        ) from None
