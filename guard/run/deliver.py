"""The end of a run, durable first: reports on disk, then tracking, then the console.

What ``guard run`` promises about its results, whatever fails:

- Output paths (``--json``, ``--junit``, ``--markdown``, ``--html``) are checked before
  anything is measured: a directory, a missing or unwritable parent, or one path given for
  two reports is exit 2 at once, not after the whole run.
- The reports are written before tracking is tried, each independently (one that cannot be
  written does not stop the others), and written again with the tracking receipt after.
- The finished results are journalled in ``.guard/pending/`` before the first MLflow call
  and the file is removed once they are logged: a kill while logging (SIGKILL included)
  leaves them there for ``guard track push --pending``. A tracking failure keeps that file
  (with the error); when even that cannot be written, the message says where the results
  are (the ``--json`` file) or how to keep them.
- SIGINT and SIGTERM stop the run between steps: the results measured so far are reported
  and kept (``"interrupted": "SIGTERM"``), MLflow runs being logged are marked KILLED, and
  the exit code is 128 + the signal number (130, 143).
"""

from __future__ import annotations

import signal
import sys
import threading
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

from guard import report, track
from guard.core.errors import EXIT_BAD_INPUT, GuardError
from guard.run.document import RunDocument

if TYPE_CHECKING:
    from rich.console import Console


class DeliveryOptions(Protocol):
    """What the end of a run reads of its options (guard.run.runner.RunOptions has them all)."""

    workdir: Path
    json_path: Path | None
    junit_path: Path | None
    markdown_path: Path | None
    html_path: Path | None
    console: Console | None
    require_tracking: bool


def outputs(opts: DeliveryOptions) -> dict[str, Path | None]:
    """The report paths of a run, by flag (guard.report.outputs writes them)."""
    return {
        "--json": opts.json_path,
        "--junit": opts.junit_path,
        "--markdown": opts.markdown_path,
        "--html": opts.html_path,
    }


class Interruption:
    """A context that turns SIGINT/SIGTERM into a clean stop between steps.

    Entering installs a SIGTERM handler that raises KeyboardInterrupt (so ``finally``
    blocks run, as for Ctrl-C). Leaving with a KeyboardInterrupt records the signal and
    suppresses it, so the code after the ``with`` reports what was done. ``restore()`` puts
    the previous handlers back. Outside the main thread, signals cannot be handled: it only
    records KeyboardInterrupts then.
    """

    def __init__(self) -> None:
        self.signal: str | None = None
        self._received: int | None = None
        self._previous: Any = None
        self._installed = False

    def _on_term(self, signum: int, frame: Any) -> None:
        self._received = signum
        raise KeyboardInterrupt

    def __enter__(self) -> Interruption:
        if not self._installed and threading.current_thread() is threading.main_thread():
            try:
                self._previous = signal.signal(signal.SIGTERM, self._on_term)
                self._installed = True
            except (ValueError, OSError):
                pass
        return self

    def __exit__(self, exc_type: Any, exc: Any, tb: Any) -> bool:
        if exc_type is not None and issubclass(exc_type, KeyboardInterrupt):
            signum = self._received or signal.SIGINT
            self.signal = self.signal or signal.Signals(signum).name
            return True
        return False

    @property
    def exit_code(self) -> int | None:
        if self.signal is None:
            return None
        return 128 + int(signal.Signals[self.signal])

    def restore(self) -> None:
        if self._installed:
            try:
                signal.signal(signal.SIGTERM, self._previous)
            except (ValueError, OSError, TypeError):
                pass
            self._installed = False


def say(message: str, console: Console | None = None) -> None:
    """One line to stderr (or the given rich console): warnings the user must see."""
    if console is not None:
        console.print(message, markup=False, highlight=False)
    else:
        print(message, file=sys.stderr)


def finish(
    doc: RunDocument,
    code: int,
    *,
    uri: str | None,
    tracking_problem: str | None,
    opts: DeliveryOptions,
    stop: Interruption,
) -> int:
    """Reports first, then tracking (or keeping the results for later), then the console.

    What tracking did is in ``doc["tracking"]`` when this returns (the URI and log_results'
    receipt, or the error and where the results were kept); nothing is called back."""
    try:
        if stop.signal is not None:
            doc["interrupted"] = stop.signal
            say(
                f"guard: interrupted by {stop.signal}: reporting the "
                f"{len(doc.get('results') or [])} result(s) measured so far",
                opts.console,
            )
        doc["exit_code"] = stop.exit_code or code
        problems = report.write_reports(dict(doc), outputs(opts))
        if uri is not None:
            journal: Path | None = None
            try:  # on disk before the first MLflow call: a kill while logging loses nothing
                journal = track.journal_results(doc, opts.workdir)
            except GuardError as exc:
                say(f"warning: {exc}", opts.console)
            if tracking_problem is None and stop.signal is None:
                with stop:  # a signal while logging: track marks the runs KILLED
                    try:
                        receipt = track.log_journalled(dict(doc), uri, journal)  # then removed
                        doc["tracking"] = {
                            "uri": uri,
                            **{k: v for k, v in receipt.items() if k != "uri"},
                        }
                        if receipt.get("index_error"):  # logged, but not indexed
                            say(
                                f"warning: results logged to {uri}, but not indexed: "
                                f"{receipt['index_error']}",
                                opts.console,
                            )
                    except Exception as exc:  # noqa: BLE001 - never lose results to tracking
                        tracking_problem = str(exc)
            if stop.signal is not None and "tracking" not in doc:
                doc["interrupted"] = stop.signal
                tracking_problem = tracking_problem or (
                    f"interrupted by {stop.signal} before the results were logged"
                )
            if tracking_problem is not None:
                doc["tracking"] = {"uri": uri, "error": tracking_problem}
                try:
                    kept = track.keep_results(doc, opts.workdir, journal)
                except GuardError as exc:
                    json_ok = opts.json_path is not None and not any(
                        line.startswith("--json ") for line in problems
                    )
                    where = (
                        f"the results are in {opts.json_path}"
                        if json_ok
                        else "pass --json PATH to keep the results when tracking fails"
                    )
                    say(
                        f"guard: error: tracking failed ({tracking_problem}) and {exc}; {where}",
                        opts.console,
                    )
                    code = max(code, EXIT_BAD_INPUT)  # nothing kept to push later
                else:
                    doc["tracking"]["kept"] = str(kept)
                    if stop.signal is not None:
                        say(
                            f"guard: {tracking_problem} to {uri}: results kept at {kept}; send "
                            f"them later with: guard track push {kept} --tracking-uri {uri}",
                            opts.console,
                        )
                    else:
                        say(track.unreachable_message(uri, kept), opts.console)
                # Kept, and the push command printed: the checks decide the exit code,
                # unless --require-tracking made tracking part of it (README: exit codes).
                if opts.require_tracking:
                    code = max(code, EXIT_BAD_INPUT)
            doc["exit_code"] = stop.exit_code or code
            problems = report.write_reports(dict(doc), outputs(opts))
        for line in problems:
            say(f"guard: error: {line}", opts.console)
        if problems:
            code = max(code, EXIT_BAD_INPUT)
            doc["exit_code"] = stop.exit_code or code
        report.render_console(doc, opts.console)
        return stop.exit_code or code
    finally:
        stop.restore()
