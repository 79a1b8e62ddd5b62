"""``guard fit`` and ``guard partition`` share the model argument: a path or zoo:<name>,
``--input NAME=D0,D1`` to bind a shape, and an unbound input's error says that flag."""

from __future__ import annotations

import os
import sys

import pytest

from guard.cli.main import EXIT_BROKEN_PIPE, main
from guard.cli.model_args import input_shapes
from guard.core.errors import UsageError


@pytest.mark.parametrize(
    "argv",
    [
        ["partition", "zoo:mlp"],
        ["fit", "zoo:mlp", "--budget", "1KiB", "--no-latency"],
    ],
)
def test_an_unbound_input_names_the_flag_that_binds_it(argv, capsys):
    assert main(argv) == 2
    err = capsys.readouterr().err.strip()
    assert err == (
        "guard: error: zoo:mlp: input 'x' dim 0 ('N') is dynamic and unbound. "
        "Bind it with --input x=1,256."
    )


def test_the_bound_input_is_used(capsys):
    assert main(["partition", "zoo:mlp", "--input", "x=1,256"]) == 0
    assert "1 partition(s)" in capsys.readouterr().out


@pytest.mark.parametrize("item", ["x", "=1,2", "x=1,a"])
def test_a_malformed_binding_is_a_usage_error(item):
    with pytest.raises(UsageError, match=r"^--input .*expected NAME=D0,D1"):
        input_shapes([item])


def test_bindings_parse():
    assert input_shapes(["x=1,256", "y=3"]) == {"x": (1, 256), "y": (3,)}
    assert input_shapes(None) == {}


def test_a_missing_model_file_is_a_usage_error(tmp_path, capsys):
    assert main(["partition", str(tmp_path / "m.onnx")]) == 2
    assert "no such model file" in capsys.readouterr().err


def test_a_reader_that_goes_away_ends_the_command_quietly(monkeypatch, capsys):
    r, w = os.pipe()
    os.close(r)  # the reader (`| head`) has gone: the first write raises EPIPE
    saved = os.dup(1)
    try:
        os.dup2(w, 1)
        os.close(w)
        monkeypatch.setattr(sys, "stdout", os.fdopen(os.dup(1), "w", buffering=1))
        code = main(["partition", "zoo:mlp", "--input", "x=1,256"])
    finally:
        os.dup2(saved, 1)
        os.close(saved)
    assert code == EXIT_BROKEN_PIPE
    assert "internal error" not in capsys.readouterr().err
