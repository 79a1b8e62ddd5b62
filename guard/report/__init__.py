"""guard.report: console table and progress bar, results JSON, JUnit XML, Markdown, HTML.

Every writer takes the results document (docs/ARCHITECTURE.md, results contract v1) and
tolerates missing or None fields, as an ``error`` result may have them. Files are written
atomically. The MLflow dashboard (guard.report.dashboard) reads runs, not a results
document, and is imported on its own.
"""

from guard.report.console import ProgressHandle, progress, render_console, results_table
from guard.report.html_report import to_html, write_html
from guard.report.json_report import write_json
from guard.report.junit import to_junit, write_junit
from guard.report.markdown import to_markdown, write_markdown
from guard.report.outputs import check_outputs, write_reports

__all__ = [
    "ProgressHandle",
    "check_outputs",
    "progress",
    "render_console",
    "results_table",
    "to_html",
    "to_junit",
    "to_markdown",
    "write_html",
    "write_json",
    "write_junit",
    "write_markdown",
    "write_reports",
]
