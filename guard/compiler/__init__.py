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

from guard.compiler.frontend import import_onnx
from guard.compiler.ir.core import Constant, Graph, Node, Value
from guard.compiler.ir.text import parse_graph, print_graph
from guard.compiler.passes.diff import graph_diff
from guard.compiler.passes.pipeline import PipelineReport, optimize
from guard.compiler.passes.verify import VerifyError, verify
from guard.compiler.reference import run_reference

__all__ = [
    "Constant", "Graph", "Node", "Value", "VerifyError", "graph_diff", "import_onnx",
    "PipelineReport", "optimize", "parse_graph", "print_graph", "run_reference", "verify",
]  # fmt: skip
