"""``guard run`` against the base branch, by default when it is known.

With tracking on and no ``--baseline``, a run whose base branch is known (``--base-branch``,
else ``GITHUB_BASE_REF``, which GitHub sets on pull-request events) finds the last
finished invocation of the same suite on that branch and prints the comparison (``guard
compare``'s table). The comparison informs; it does not change the run's exit code,
which its own checks decide (a CI job that wants a gate runs ``guard compare`` or
``guard ab --base-ref``). ``--no-base-compare`` turns it off.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import Any, TextIO

from guard.compare.base_branch import last_finished_invocation
from guard.compare.compare import IncompatibleBaselineError, compare_docs
from guard.compare.reports import to_markdown
from guard.compare.written import ComparisonDocumentJson
from guard.core.errors import GuardError
from guard.results.documents import ComparisonDocument, ResultsDocument
from guard.stats.calibrate import default_noise_path, load_noise


def base_branch(flag: str | None) -> str | None:
    """``--base-branch``, else GitHub's ``GITHUB_BASE_REF`` (empty outside pull requests)."""
    return flag or os.environ.get("GITHUB_BASE_REF") or None


def compare_with_base(
    doc: ResultsDocument,
    branch: str,
    *,
    workdir: Path,
    out: TextIO | None = None,
    finder: Any = None,
    loader: Any = None,
) -> ComparisonDocumentJson | None:
    """Print the comparison of ``doc`` (a tracked run) with the base branch's last finished
    invocation; returns the comparison document, or None with one line saying why not."""
    out = out or sys.stdout
    tracking = doc.tracking  # what guard.run.deliver says tracking did: {uri, error, ...}
    uri = tracking.get("uri")
    if not uri or tracking.get("error"):
        print(
            f"guard: base branch {branch}: not compared (tracking did not log this run)", file=out
        )
        return None
    suite = str(doc.suite)
    head_commit = doc.git.commit
    try:
        base, skipped = last_finished_invocation(
            uri, suite, branch, exclude_commit=head_commit, finder=finder, loader=loader
        )
    except GuardError as exc:
        print(f"guard: base branch {branch}: not compared ({exc})", file=out)
        return None
    for line in skipped:
        print(f"guard: base branch {branch}: skipped {line}", file=out)
    if base is None:
        print(
            f"guard: base branch {branch}: no finished run of suite {suite!r} to compare with "
            f"in {uri}",
            file=out,
        )
        return None
    noise_path = default_noise_path(workdir, suite)
    noise = load_noise(noise_path) if noise_path.is_file() else None
    try:
        cmp = compare_docs(base.doc, doc, noise=noise, base_label=base.label, head_label="this run")
    except (IncompatibleBaselineError, GuardError) as exc:
        print(f"guard: base branch {branch}: not compared with {base.label}: {exc}", file=out)
        return None
    out.write(
        to_markdown(ComparisonDocument.from_json(cmp), f"guard run vs base branch {base.label}")
    )
    return cmp
