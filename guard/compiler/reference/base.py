"""What every reference kernel shares: its signature and the one operand accessor.

A kernel takes the node's inputs (``None`` where an optional input is absent) and its IR
attributes, and returns one array per output.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from guard.compiler.ir.core import Attrs

Xs = list[np.ndarray | None]
Kernel = Callable[[Xs, Attrs], list[np.ndarray]]


def arg(xs: Xs, i: int = 0) -> np.ndarray:
    """Input ``i``, which the op requires (the importer refused a node without it)."""
    x = xs[i]
    assert x is not None, f"required input {i} is absent"
    return x
