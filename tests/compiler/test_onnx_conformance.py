"""onnx's backend conformance suite (node/model cases generated in memory by onnx 1.23)
against the bundled compiler, through guard.compiler.runtime.conformance.GuardBackend.

CPU cases only. The cases listed in onnx_conformance_xfail.txt are expected failures
(unsupported ops and dtypes, control flow, sequences...); an unexpected pass fails the run
so the list stays true. `test_conformance_summary` prints the counts and the failing ops.
~30 s on one core here.
"""

from __future__ import annotations

import collections
import os
import re
import tempfile
from pathlib import Path

import pytest

os.environ.setdefault("ONNX_HOME", tempfile.mkdtemp(prefix="onnx_home_"))

import onnx.backend.test  # noqa: E402

from guard.compiler.runtime.conformance import GuardBackend  # noqa: E402

pytestmark = pytest.mark.slow

XFAIL_FILE = Path(__file__).with_name("onnx_conformance_xfail.txt")


def expected_failures() -> dict[str, str]:
    out = {}
    for line in XFAIL_FILE.read_text().splitlines():
        if line.strip() and not line.startswith("#"):
            name, _, why = line.partition("#")
            out[name.strip()] = why.strip()
    return out


_backend_test = onnx.backend.test.BackendTest(GuardBackend, __name__)
_backend_test.include(r".*_cpu$")
for _name in expected_failures():
    _backend_test.xfail(f"^{re.escape(_name)}$")
globals().update(_backend_test.test_cases)


def test_conformance_summary(summary_line) -> None:
    xf = expected_failures()
    total = sum(
        1
        for case in _backend_test.test_cases.values()
        for attr in dir(case)
        if attr.startswith("test_") and attr.endswith("_cpu")
    )
    by_reason = collections.Counter(
        re.sub(r"^(unsupported op|unsupported dtype|control flow) .*", r"\1", why)
        for why in xf.values()
    )
    ops = collections.Counter(
        why.split()[-1] for why in xf.values() if why.startswith("unsupported op")
    )
    # Every case not listed as an expected failure must pass (the list is the xfail set),
    # so on a green run this is the pass count.
    summary_line(
        f"ONNX conformance (CPU) on guard's compiler: {total - len(xf)} of {total} cases pass; "
        f"{len(xf)} expected failures"
    )
    summary_line("  by reason: " + ", ".join(f"{k}: {v}" for k, v in by_reason.most_common()))
    summary_line("  unsupported ops: " + ", ".join(f"{k} ({v})" for k, v in sorted(ops.items())))
    assert total > 1800
    assert len(xf) == len(set(xf)) and all(n.endswith("_cpu") for n in xf)
