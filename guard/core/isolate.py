"""Run a risky step in a forked child, so that a native crash or a hang costs one result.

onnx's C++ shape inference, onnxruntime's session creation and the TVM importer run native
code on the user's model; a malformed model can make them abort (SIGABRT), crash (SIGSEGV)
or run for ever. ``run_isolated`` runs such a step in a child process made by ``fork`` (so
the child starts warm: nothing is imported again, and the step sees the parent's state) and
hands back its return value, or re-raises its exception, in the parent. A child killed by a
signal becomes a ``NativeCrashError`` naming the step and the signal; a child past its time
limit is killed with its whole process group and becomes a ``StepTimeoutError``. Either is
an ``error`` result for that one model: the run goes on.

The child is the leader of its own process group (a Ctrl-C at the terminal reaches only
the parent, which then kills the group) and gets the default SIGTERM/SIGINT handlers.
It leaves with ``os._exit``: no atexit handlers, no flushing of the parent's buffers twice.
Results travel back pickled over a pipe; only guard's own values (build records, arrays,
exceptions) cross it, never anything read from the user's files.
"""

from __future__ import annotations

import faulthandler
import os
import pickle
import select
import signal
import sys
import time
import traceback
from collections.abc import Callable
from typing import Any, TypeVar

from guard.core.errors import GuardError, InternalError, ModelError, UsageError

T = TypeVar("T")

# Set GUARD_NO_ISOLATE=1 to run every step in-process (a debugger, a profiler).
ENV_DISABLE = "GUARD_NO_ISOLATE"


class NativeCrashError(ModelError):
    """A step on the user's model was killed by a signal (native code aborted or crashed)."""


class StepTimeoutError(UsageError):
    """A step ran past its time limit and was killed."""


def signal_name(num: int) -> str:
    try:
        return signal.Signals(num).name
    except ValueError:
        return f"signal {num}"


def _child(fn: Callable[..., Any], args: tuple, kwargs: dict, wfd: int) -> None:
    code = 0
    try:
        os.setpgid(0, 0)
        faulthandler.disable()  # a crash is reported by the parent in one line
        signal.signal(signal.SIGTERM, signal.SIG_DFL)
        signal.signal(signal.SIGINT, signal.SIG_DFL)
        data = packed(outcome(fn, *args, **kwargs))
        with os.fdopen(wfd, "wb") as w:
            w.write(data)
    except BaseException:  # noqa: BLE001 - never return into the parent's stack
        code = 70
    finally:
        try:
            sys.stdout.flush()
            sys.stderr.flush()
        finally:
            os._exit(code)


def _kill_group(pid: int) -> None:
    """SIGKILL the child's group (or the child, before it made its group); never after reaping."""
    for target in (lambda: os.killpg(pid, signal.SIGKILL), lambda: os.kill(pid, signal.SIGKILL)):
        try:
            target()
            return
        except (ProcessLookupError, PermissionError):
            continue


def run_isolated(
    fn: Callable[..., T],
    *args: Any,
    what: str,
    timeout_s: float | None = None,
    where: str | None = None,
    hint: str | None = None,
    clock: Callable[[], float] = time.monotonic,
    **kwargs: Any,
) -> T:
    """``fn(*args, **kwargs)`` in a forked child; its value, or its exception re-raised.

    ``what`` names the step for messages ("the onnxruntime build of resnet50"); ``where``
    is the suite location of the model. ``timeout_s`` None means no limit.
    """
    if os.environ.get(ENV_DISABLE) or not hasattr(os, "fork"):
        return fn(*args, **kwargs)
    sys.stdout.flush()
    sys.stderr.flush()
    rfd, wfd = os.pipe()
    pid = os.fork()
    if pid == 0:  # pragma: no cover - the child; its coverage is not collected
        os.close(rfd)
        _child(fn, args, kwargs, wfd)
    os.close(wfd)
    chunks: list[bytes] = []
    status: int | None = None
    try:
        deadline = None if timeout_s is None else clock() + timeout_s
        while True:
            wait = None if deadline is None else max(0.0, deadline - clock())
            ready, _, _ = select.select([rfd], [], [], wait)
            if not ready:
                _kill_group(pid)
                os.waitpid(pid, 0)
                status = -1
                raise StepTimeoutError(
                    f"{what} ran past its time limit of {timeout_s:g} s and was stopped",
                    where=where,
                    hint=hint
                    or "Raise build_timeout_s in the suite (defaults or the model) if "
                    "the model is that large, or simplify the model.",
                )
            chunk = os.read(rfd, 1 << 20)
            if not chunk:
                break
            chunks.append(chunk)
        # Wait for the exit without reaping: while the child is a zombie its pid and group
        # cannot be reused, so what it started and left behind can be killed safely.
        os.waitid(os.P_PID, pid, os.WEXITED | os.WNOWAIT)
        try:
            os.killpg(pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass
        _, status = os.waitpid(pid, 0)
    finally:
        os.close(rfd)
        if status is None:  # interrupted (Ctrl-C, SIGTERM): take the child down too
            _kill_group(pid)
            try:
                os.waitpid(pid, 0)
            except ChildProcessError:
                pass
    if os.WIFSIGNALED(status):
        sig = os.WTERMSIG(status)
        raise NativeCrashError(
            f"{what} crashed: killed by {signal_name(sig)} in native code (onnx, onnxruntime "
            "or tvm); the other models are unaffected",
            where=where,
            hint="The model trips a bug in a native library: check it with onnx.checker and "
            "onnxruntime, re-export it, or report it upstream with the model.",
        )
    data = b"".join(chunks)
    if not data:
        code = os.WEXITSTATUS(status) if os.WIFEXITED(status) else status
        raise InternalError(f"{what} ended without a result (exit status {code})", where=where)
    try:
        payload = pickle.loads(data)  # noqa: S301 - written by our own child, above
    except Exception as exc:  # noqa: BLE001
        raise InternalError(
            f"{what}: its result could not be read back ({exc})", where=where
        ) from None
    return unpacked(payload, what, where=where, origin="the isolated child process")


def outcome(fn: Callable[..., Any], *args: Any, **kwargs: Any) -> tuple[Any, ...]:
    """What calling ``fn`` came to, to send to the parent: ``("ok", value)`` or
    ``("err", exception, traceback)``."""
    try:
        return ("ok", fn(*args, **kwargs))
    except BaseException as exc:  # noqa: BLE001 - everything goes back to the parent
        return ("err", exc, traceback.format_exc())


def packed(payload: tuple[Any, ...]) -> bytes:
    """``payload`` pickled; a value or exception that cannot be pickled travels as text:
    ``("text", type name or "result", message, whether it was a UsageError)``."""
    try:
        return pickle.dumps(payload, protocol=pickle.HIGHEST_PROTOCOL)
    except Exception:  # noqa: BLE001 - an unpicklable value or exception
        raised = payload[1] if payload[0] == "err" else None
        return pickle.dumps(
            (
                "text",
                type(raised).__name__ if raised else "result",
                str(raised) if raised else "the step returned an unpicklable value",
                isinstance(raised, UsageError),
            )
        )


def unpacked(
    payload: tuple[Any, ...], what: str, *, where: str | None, origin: str, prefix: bool = False
) -> Any:
    """The value of an ``outcome`` that came back from ``origin`` (a child, a worker), or
    its exception raised here: guard's own as it was, any other with the child's
    traceback as a note, and a ``SystemExit`` (a library that exits instead of raising)
    as an ``InternalError``, so that it fails the step, not this process. ``prefix`` puts
    ``what`` before a message that travelled as text."""
    if payload[0] == "ok":
        return payload[1]
    if payload[0] == "text":
        _, name, message, usage = payload
        cls = UsageError if usage else InternalError
        text = f"{name}: {message}" if name != "result" else message
        raise cls(f"{what}: {text}" if prefix else text, where=where)
    raised, tb = payload[1], payload[2]
    if isinstance(raised, GuardError):
        raise raised  # guard's own one-line error: where it was raised says nothing more
    if isinstance(raised, BaseException) and not isinstance(raised, Exception):
        raise InternalError(
            f"{what} ended with {type(raised).__name__}({raised}) in {origin}", where=where
        )
    if isinstance(raised, BaseException):
        raised.add_note(f"in {origin}:\n{tb}")
        raise raised
    raise InternalError(f"{what} failed: {raised!r}", where=where)


def is_isolated_failure(exc: BaseException) -> bool:
    """Whether ``exc`` came from the isolation itself (a crash or a time limit)."""
    return isinstance(exc, NativeCrashError | StepTimeoutError)


__all__ = [
    "ENV_DISABLE",
    "GuardError",
    "NativeCrashError",
    "StepTimeoutError",
    "is_isolated_failure",
    "run_isolated",
]
