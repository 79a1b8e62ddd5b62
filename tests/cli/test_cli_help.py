"""Every subcommand's --help has a description and examples, and the examples parse."""

from __future__ import annotations

import shlex

import pytest

from guard.cli import help as cli_help
from guard.cli.main import build_parser, main


def test_every_subcommand_has_a_description_and_an_example():
    assert cli_help.undocumented(build_parser()) == []


@pytest.mark.parametrize("path", sorted(cli_help.DOCS))
def test_examples_are_valid_command_lines(path, capsys):
    parser = build_parser()
    for example in cli_help.DOCS[path][1]:
        argv = shlex.split(example)
        assert argv[0] == "guard" and " ".join(argv[1:]).startswith(path), example
        args = parser.parse_args(argv[1:])  # SystemExit(2) on an unknown flag or missing arg
        assert callable(args.func)
    with pytest.raises(SystemExit) as done:
        main([*path.split(), "--help"])
    assert done.value.code == 0
    out = capsys.readouterr().out
    assert "examples:\n  guard " in out
    assert all(len(line) <= 100 for line in out.splitlines() if not line.startswith("  guard"))
