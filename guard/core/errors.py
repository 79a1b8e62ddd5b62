"""Errors a user can hit, each with the exit code the CLI contract gives it.

Exit codes of ``guard run`` (docs/ARCHITECTURE.md): 0 every check passed; 1 a check failed;
2 the suite or a model could not be used; 3 guard itself failed.
"""

from __future__ import annotations

EXIT_OK = 0
EXIT_CHECK_FAILED = 1
EXIT_BAD_INPUT = 2
EXIT_INTERNAL = 3


class GuardError(Exception):
    """An error with a one-line, user-facing message and an exit code.

    The message must name the file, key or node at fault and say what to do.
    """

    exit_code = EXIT_INTERNAL

    def __init__(self, message: str, *, where: str | None = None, hint: str | None = None):
        self.where = where
        self.hint = hint
        head = (f"{where}: {message}" if where else message).rstrip()
        if hint:
            # Two sentences, not one run-on line ("... dynamic and unbound. Bind it ...").
            if head and head[-1] not in ".!?:;":
                head += "."
            head = f"{head} {hint.strip()}"
        super().__init__(head.replace("\n", " "))


class UsageError(GuardError):
    """The suite, a model, a path or an argument cannot be used (exit 2)."""

    exit_code = EXIT_BAD_INPUT


class SchemaError(UsageError):
    """A document guard reads (suite, results, manifest, ...) breaks its contract (exit 2).

    ``where`` is the file (or ``run:<id>``), ``field`` the dotted key at fault, so the
    message reads ``results.json: results[0].rounds: must be a non-empty list``.
    guard.core.schema builds these; the per-document errors (SuiteError, ManifestError, ...)
    are its subclasses.
    """

    def __init__(
        self,
        message: str,
        *,
        where: str | None = None,
        field: str | None = None,
        hint: str | None = None,
    ):
        self.file = where
        self.field = field
        located = ": ".join(part for part in (where, field) if part) or None
        super().__init__(message, where=located, hint=hint)


class SuiteError(SchemaError):
    """A suite file is malformed: names the file and the key."""


class ModelError(UsageError):
    """A model cannot be loaded, bound or compiled: names the file and the node/input."""


class UnboundInputError(ModelError):
    """An input's dim is dynamic (or the input has no shape) and nothing binds it. Carries
    the bare message, the input's name and an example shape, so a command that binds
    shapes its own way (``--input NAME=D0,D1``) can say that instead of the suite's key."""

    def __init__(
        self,
        message: str,
        *,
        where: str | None = None,
        hint: str | None = None,
        input_name: str = "",
        example: tuple[int, ...] | None = None,
    ):
        super().__init__(message, where=where, hint=hint)
        self.bare = message
        self.input_name = input_name
        self.example = example


class UnsupportedOpError(ModelError):
    """No backend in the chain supports an operator."""


class TrackingError(UsageError):
    """The tracking server cannot be reached or refused a write."""


class InternalError(GuardError):
    """guard itself failed (exit 3)."""

    exit_code = EXIT_INTERNAL
