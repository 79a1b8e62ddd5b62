"""The report files of one results document: checked before anything runs, then written.

``guard run`` and ``guard merge`` take the same flags (``--json``, ``--junit``,
``--markdown``, ``--html``) and write them through here: a directory, a missing or
unwritable parent, or one path given for two reports is refused (UsageError, exit 2)
before any work; when writing, each report is written independently, and one that cannot
be written does not stop the others.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping
from pathlib import Path

from guard.core.errors import GuardError, UsageError
from guard.core.fsutil import describe_os_error
from guard.report.html_report import write_html
from guard.report.json_report import write_json
from guard.report.junit import write_junit
from guard.report.markdown import write_markdown

# The flag of each report, in the order they are written.
# Each takes a results document as written (guard run's or guard merge's: a TypedDict of
# guard.run.document) and reads it as a guard.results.documents.ResultsDocument.
WRITERS: dict[str, Callable[[Mapping[str, object], Path], Path]] = {
    "--json": write_json,
    "--junit": write_junit,
    "--markdown": write_markdown,
    "--html": write_html,
}

Outputs = Mapping[str, str | Path | None]  # flag -> path (None: not asked for)


def check_outputs(outputs: Outputs) -> None:
    """Refuse output paths that cannot be written, before anything runs (UsageError)."""
    seen: dict[Path, str] = {}
    for flag in WRITERS:
        p = outputs.get(flag)
        if p is None:
            continue
        target = Path(p)
        where = f"{flag} {p}"
        try:
            resolved = target.resolve()
        except (RuntimeError, OSError):
            raise UsageError("the path is a symlink loop", where=where) from None
        parent = resolved.parent
        if not parent.is_dir():
            raise UsageError(
                f"output directory {parent} does not exist",
                where=where,
                hint="Create it or choose another path.",
            )
        if resolved.is_dir():
            raise UsageError(
                "is a directory, not a file",
                where=where,
                hint="Give a file name, e.g. results.json.",
            )
        if resolved.exists() and not resolved.is_file():
            raise UsageError("exists and is not a regular file", where=where)
        if not os.access(parent, os.W_OK | os.X_OK):
            raise UsageError(
                f"directory {parent} is not writable",
                where=where,
                hint="Choose a writable directory.",
            )
        if resolved in seen:
            raise UsageError(
                f"the same file as {seen[resolved]}",
                where=where,
                hint="Give each report its own path.",
            )
        seen[resolved] = flag


def write_reports(doc: Mapping[str, object], outputs: Outputs) -> list[str]:
    """Write every requested report; return one line per report that could not be written."""
    problems = []
    for flag, writer in WRITERS.items():
        p = outputs.get(flag)
        if p is None:
            continue
        try:
            writer(doc, Path(p))
        except GuardError as exc:
            problems.append(f"{flag} {p}: {exc}")
        except OSError as exc:
            problems.append(f"{flag} {p}: cannot write it: {describe_os_error(exc)}")
    return problems
