"""guard.compiler: the bundled compiler (typed IR, ONNX import, reference interpreter, passes).

Public API (others build on it)::

    import_onnx(path_or_ModelProto, input_shapes) -> Graph
    optimize(graph, pipeline="O2") -> (Graph, PipelineReport)
    run_reference(graph, feeds) -> dict[str, np.ndarray]
    graph_diff(before, after, report) -> dict
    print_graph(graph) -> str;  parse_graph(text, weights=None) -> Graph
    verify(graph)
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from guard.compiler.frontend import import_onnx
from guard.compiler.ir import Constant, Graph, Node, Value
from guard.compiler.reference import run_reference
from guard.compiler.text import parse_graph, print_graph
from guard.compiler.verify import VerifyError, verify

if TYPE_CHECKING:
    from guard.compiler.pipeline import PipelineReport


def optimize(graph: Graph, pipeline: str = "O2", **kw: Any) -> tuple[Graph, PipelineReport]:
    """Run a named pipeline (O0/O1/O2) on a copy of ``graph``."""
    from guard.compiler.pipeline import optimize as _optimize

    return _optimize(graph, pipeline, **kw)


def graph_diff(before: Graph, after: Graph, report: PipelineReport | None = None) -> dict[str, Any]:
    """Input graph vs final graph (see guard/compiler/diff.py)."""
    from guard.compiler.diff import graph_diff as _graph_diff

    return _graph_diff(before, after, report)


__all__ = [
    "Constant", "Graph", "Node", "Value", "VerifyError", "graph_diff", "import_onnx",
    "optimize", "parse_graph", "print_graph", "run_reference", "verify",
]  # fmt: skip
