"""An int8 product of too few rows to cut by rows (a GEMV: a classifier's fully connected
layer) is cut into runs of B's packed panels: every task writes its columns of every row,
bit-identical to the reference at 1 and 2 threads on the host and AVX2 classes."""

from __future__ import annotations

import numpy as np
import pytest

from guard.compiler.codegen.llvm_target import host_target

from .test_int8 import _target, check, qmatmul


@pytest.mark.parametrize("cls", [None, "avx2"])
@pytest.mark.parametrize("case", [dict(a=(1, 2304), n=1000), dict(a=(3, 1500), n=777, zw=True),
                                  dict(a=(1, 1, 4096), n=1024, adt=np.int8)])  # fmt: skip
def test_a_gemv_splits_by_columns_and_stays_exact(cls: str | None, case: dict) -> None:
    target = _target(cls) if cls else host_target()
    code = check(qmatmul(**case), target, threads=(1, 2))
    (step,) = code.plan.steps()
    assert len(step.parts) >= 2, "the GEMV was not split"
    cols = [t.attrs["cols"] for t in step.parts]
    assert cols[0][0] == 0 and cols[-1][1] == case["n"]
    assert all(a[1] == b[0] for a, b in zip(cols, cols[1:], strict=False)), cols
