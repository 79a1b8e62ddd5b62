"""Run a test's body in a fresh interpreter.

A whole int8 model maps objects of megabytes into the process and runs them; a native
crash there (an abort in LLVM, a fault in generated code) would end the whole pytest
process. Such a test runs its body in its own interpreter, so a crash fails that test
alone, with the child's stderr in the failure (LLVM's RuntimeDyld did abort this way on a
32-bit relocation before x86_64 objects used the large code model, issue 38).
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

TESTS = Path(__file__).resolve().parents[1]
SKIP = 77  # the body called pytest.skip

_CODE = (
    "import sys, pytest\n"
    "sys.path.insert(0, {tests!r})\n"
    "from {module} import {func} as f\n"
    "try:\n"
    "    f(*sys.argv[1:])\n"
    "except pytest.skip.Exception as e:\n"
    "    print(e.msg, file=sys.stderr)\n"
    "    sys.exit({skip})\n"
)


def run_isolated(module: str, func: str, *args: str, timeout_s: float = 1500) -> None:
    """Call ``module.func(*args)`` (``module`` relative to tests/, e.g.
    ``compiler.test_int8_models``) in a new interpreter; its skip is this test's skip, any
    other failure (an assertion, an abort) fails this test with the child's stderr."""
    code = _CODE.format(tests=str(TESTS), module=module, func=func, skip=SKIP)
    r = subprocess.run(
        [sys.executable, "-c", code, *args], capture_output=True, text=True, timeout=timeout_s
    )
    if r.returncode == SKIP:
        pytest.skip(r.stderr.strip().splitlines()[-1] if r.stderr.strip() else "skipped")
    assert r.returncode == 0, f"exit {r.returncode}:\n{r.stderr[-4000:]}"
