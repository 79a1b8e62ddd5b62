"""guard's command line: thin. Parses arguments, calls one command, sets the exit code.

Each command lives in its own module, ``guard/cli/<command>.py`` (COMMANDS lists them),
whose ``register(subparsers)`` adds that command's parser and nothing else's; options
several comparison commands share are in guard/cli/options.py, and guard/cli/help.py adds
every command's description and examples. A command's own modules are imported inside its
``cmd_*`` function, when it runs: parsing (``--help``, a bad flag) never builds the
compiler, the backends or the tracking client.

Every error a user can cause prints one line (``guard: error: ...``) and exits with the
documented code: 2 for a suite, model, path or server that cannot be used, 3 for guard's
own failures (run with GUARD_DEBUG=1 for the traceback).
"""

from __future__ import annotations

import argparse
import importlib
import os
import sys
import warnings

from guard import __version__
from guard.core.errors import (
    EXIT_BAD_INPUT,
    EXIT_INTERNAL,
    GuardError,
)

# One module per command, in the order ``guard --help`` lists them; each has
# ``register(subparsers)`` (its parser, nothing else's) and imports what the command uses
# only when it runs.
COMMANDS = (
    "run", "tune", "golden", "manifest", "zoo", "partition", "track", "dashboard", "compare",
    "ab", "bump", "history", "calibrate", "merge", "doctor", "reduce", "init", "bisect", "profile",
    "cache", "fit", "schema", "quantize",
)  # fmt: skip


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="guard",
        description="guard: a regression guard for ML deployment stacks. Builds, "
        "measures, checks and logs a suite of models; exit 0 pass, 1 a check failed, 2 bad "
        "input, 3 guard failed.",
    )
    p.add_argument("--version", action="version", version=f"guard {__version__}")
    sub = p.add_subparsers(dest="command", metavar="COMMAND")
    for name in COMMANDS:
        importlib.import_module(f"guard.cli.{name}").register(sub)
    from guard.cli import help as cli_help

    cli_help.document(p)
    return p


def _one_line_warning(
    message: Warning | str, category: type[Warning], filename: str, lineno: int,
    line: str | None = None,
) -> str:  # fmt: skip
    """A warning the user sees is one line, like an error: no source location or code."""
    return f"guard: warning: {message}\n"


EXIT_BROKEN_PIPE = 141


def main(argv: list[str] | None = None) -> int:
    os.environ.setdefault("MLFLOW_DISABLE_TELEMETRY", "true")
    warnings.formatwarning = _one_line_warning
    try:  # a Ctrl-C at any stage, parsing and the command's imports included, is exit 130
        parser = build_parser()
        args = parser.parse_args(argv)
        if not getattr(args, "func", None):
            parser.print_help()
            return EXIT_BAD_INPUT
        return int(args.func(args))
    except GuardError as exc:
        print(f"guard: error: {exc}", file=sys.stderr)
        return exc.exit_code
    except KeyboardInterrupt:
        print("guard: interrupted", file=sys.stderr)
        return 130
    except BrokenPipeError:
        # The reader of stdout went away (`guard partition M | head`): what was written
        # stands, nothing more is said, and the exit is a SIGPIPE's (128 + 13), as a C
        # tool's would be. Python's flush at exit would raise again on the dead pipe.
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        os.close(devnull)
        return EXIT_BROKEN_PIPE
    except Exception as exc:  # noqa: BLE001 - the last line of defence: one line, exit 3
        if os.environ.get("GUARD_DEBUG"):
            raise
        print(
            f"guard: internal error: {type(exc).__name__}: {exc} (set GUARD_DEBUG=1 for the "
            "traceback, and please report it)",
            file=sys.stderr,
        )
        return EXIT_INTERNAL


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
