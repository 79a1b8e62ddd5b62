"""Console output: the results table, and a progress bar while models build and run.

Both draw with rich on a terminal. Off a terminal (CI logs, pipes) the table still prints,
plainly, and the progress bar is silent: a live bar in a log file is only noise.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from rich import box
from rich.console import Console
from rich.progress import (
    BarColumn,
    MofNCompleteColumn,
    Progress,
    SpinnerColumn,
    TaskID,
    TextColumn,
    TimeElapsedColumn,
)
from rich.table import Table
from rich.text import Text

from guard.report import _summary as S
from guard.results.documents import ResultsDocument

VERDICT_STYLE = {
    "pass": "green",
    "fail": "bold red",
    "error": "bold magenta",
    "inconclusive": "yellow",
}
OVERALL_STYLE = {"pass": "bold green", "fail": "bold red", "inconclusive": "bold yellow",
                 "interrupted": "bold yellow"}  # fmt: skip


# Shorter than the Markdown headers: a CI log is 80 columns wide.
CONSOLE_HEADERS = [
    "model",
    "backend",
    "verdict",
    "p50 ms",
    "p90 ms",
    "parts",
    "arena MiB\n(lower bd)",
    "max abs\nerr",
    "failed checks",
]
_NO_WRAP = {2, 3, 4, 5, 6, 7}
# Left out below this width; failed checks are listed beneath the table anyway.
_COMPACT_DROP = {4, 8}
COMPACT_BELOW = 100


def results_table(doc: ResultsDocument | Any, compact: bool = False) -> Table:
    """The results as a rich Table, one row per result, verdicts coloured.

    ``compact`` leaves out p90 and the failed-check names so the table fits 80 columns.
    """
    doc = S.document(doc)
    table = Table(
        title=f"guard {S.text(doc.suite, 'guard')}",
        title_justify="left",
        box=box.SIMPLE_HEAD,
        pad_edge=False,
    )
    keep = [i for i in range(len(CONSOLE_HEADERS)) if not (compact and i in _COMPACT_DROP)]
    for i in keep:
        table.add_column(
            CONSOLE_HEADERS[i],
            justify="right" if i in S.NUMERIC_COLUMNS else "left",
            no_wrap=i in _NO_WRAP,
            overflow="fold",
        )
    for r in doc.results:
        cells = S.row(r).cells()
        # Text, not markup strings: a model name or message may contain "[...]".
        row = [Text(c) for c in cells]
        row[2] = Text(cells[2], style=VERDICT_STYLE.get(cells[2], "bold magenta"))
        table.add_row(*(row[i] for i in keep))
    return table


def _default_console() -> Console:
    """Stdout console; in CI logs (no terminal, no COLUMNS) wide enough for the table."""
    c = Console()
    if not c.is_terminal and "COLUMNS" not in os.environ:
        c = Console(width=120)
    return c


def render_console(doc: ResultsDocument | Any, console: Console | None = None) -> None:
    """Print the results table, the headline, failed checks' messages and preflight warnings."""
    doc = S.document(doc)
    console = console or _default_console()
    if doc.results:
        console.print(results_table(doc, compact=console.width < COMPACT_BELOW))
    overall = S.overall(doc)
    head = Text(
        f"{S.OVERALL_ICON[overall]} guard {S.text(doc.suite, 'guard')}: {S.headline_counts(doc)}",
        style=OVERALL_STYLE[overall],
    )
    console.print(head)
    prov = S.provenance(doc)
    if prov:
        console.print(Text(prov, style="dim"))
    for lbl, msg in S.counted_lines(doc):
        line = Text("  # ", style="cyan")
        line.append(lbl, style="bold")
        line.append(f": {msg}")
        console.print(line)
    for f in S.failures(doc):
        line = Text("  ✗ ", style="red")
        line.append(f"{f.label} {f.check}", style="bold")
        line.append(f": {f.message}")
        console.print(line)
    for lbl, msg in S.warnings(doc):
        line = Text("  ! ", style="yellow")
        line.append(lbl, style="bold")
        line.append(f": {msg}")
        console.print(line)


class ProgressHandle:
    """What :func:`progress` yields: ``step(label)`` names the work now under way,
    ``advance()`` marks one unit done. Both are safe to call any number of times."""

    def __init__(
        self, total: int, bar: Progress | None, task: TaskID | None, log: Console | None = None
    ):
        self.total = max(int(total), 0)
        self.completed = 0
        self.label = ""
        self._bar = bar
        self._task = task
        self._log = log  # no terminal: one plain line per step (CI logs)

    def step(self, label: str) -> None:
        self.label = str(label)
        if self._bar is not None and self._task is not None:
            self._bar.update(self._task, description=self.label)
            self._bar.refresh()
        elif self._log is not None:
            self._log.print(
                f"guard: [{self.completed + 1}/{self.total}] {self.label}",
                markup=False,
                highlight=False,
                soft_wrap=True,
            )

    def advance(self) -> None:
        self.completed += 1
        if self._bar is not None and self._task is not None:
            # A caller that advances past the total must not break the bar.
            self._bar.update(self._task, completed=min(self.completed, self.total))
            self._bar.refresh()


@contextmanager
def progress(total: int, console: Console | None = None) -> Iterator[ProgressHandle]:
    """A progress bar over ``total`` units of work on an interactive terminal.

    Without a terminal it is silent, except under CI (``CI`` set), where each step is one
    plain line so a long run's log shows what it is doing.
    """
    console = console or Console(stderr=True)
    if not console.is_terminal or console.is_dumb_terminal:
        yield ProgressHandle(total, None, None, console if os.environ.get("CI") else None)
        return
    bar = Progress(
        SpinnerColumn(),
        TextColumn("{task.description}", style="progress.description", markup=False),
        BarColumn(),
        MofNCompleteColumn(),
        TimeElapsedColumn(),
        console=console,
        transient=False,
    )
    with bar:
        task = bar.add_task("starting", total=max(int(total), 0))
        yield ProgressHandle(total, bar, task)
