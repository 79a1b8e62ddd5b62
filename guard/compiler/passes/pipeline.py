"""Named pipelines: literal ordered lists of passes, each with a one-line why.

A ``FixedPoint`` entry repeats its passes until none changes anything, at most ``cap``
rounds; hitting the cap is a warning in the report (something keeps rewriting). A pass that
raises is reported as ``PassError`` naming the pass and the passes that ran before it; with
``verify_each=True`` (tests) the verifier runs after every pass and its failure is reported
the same way.
"""

from __future__ import annotations

import time
import warnings
from dataclasses import dataclass, field
from typing import Any

from guard.compiler.ir.core import Graph
from guard.compiler.ir.isa_table import DEFAULT_TABLE, TargetTable
from guard.compiler.passes.assign_layout import AssignLayout
from guard.compiler.passes.base import Pass
from guard.compiler.passes.batch_recurrent_inputs import BatchRecurrentInputs
from guard.compiler.passes.concat_bytes import ConcatBytes
from guard.compiler.passes.conv_rows import ConvRows
from guard.compiler.passes.elide_concat import ElideConcat
from guard.compiler.passes.eliminate_common_subexpressions import EliminateCommonSubexpressions
from guard.compiler.passes.eliminate_dead_code import EliminateDeadCode
from guard.compiler.passes.fold_batchnorm import FoldBatchnorm
from guard.compiler.passes.fold_constants import FoldConstants
from guard.compiler.passes.fold_integer_conv import FoldIntegerConv
from guard.compiler.passes.fold_integer_pool import FoldIntegerPool
from guard.compiler.passes.fold_qdq import FoldQdq
from guard.compiler.passes.fuse_elementwise import FuseElementwise
from guard.compiler.passes.fuse_horizontal import FuseHorizontal
from guard.compiler.passes.fuse_integer_epilogue import FuseIntegerEpilogue
from guard.compiler.passes.lower_qdq import LowerQdq
from guard.compiler.passes.merge_elementwise import MergeElementwise
from guard.compiler.passes.move_dequantize import MoveDequantize
from guard.compiler.passes.pool_bytes import PoolBytes
from guard.compiler.passes.recompose_gelu import RecomposeGelu
from guard.compiler.passes.recompose_layernorm import RecomposeLayernorm
from guard.compiler.passes.recurrent_sequence_first import RecurrentSequenceFirst
from guard.compiler.passes.simplify_algebra import SimplifyAlgebra
from guard.compiler.passes.sink_casts import SinkCasts
from guard.compiler.passes.verify import verify
from guard.core.errors import InternalError, UsageError


class PassError(InternalError):
    """A pass raised or broke the IR; the message names it and the passes before it."""


@dataclass
class FixedPoint:
    """Repeat ``passes`` until nothing changes, at most ``cap`` rounds."""

    passes: list[tuple[Pass, str]]
    cap: int = 4
    name: str = "cleanup"


@dataclass
class PassRecord:
    name: str
    changed: bool
    stats: dict[str, int]
    notes: list[str]
    seconds: float
    why: str

    def to_dict(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "changed": self.changed,
            **self.stats,
            "seconds": round(self.seconds, 4),
            "why": self.why,
            "notes": self.notes[:20],
        }


@dataclass
class PipelineReport:
    pipeline: str
    passes: list[PassRecord] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        return {
            "pipeline": self.pipeline,
            "passes": [p.to_dict() for p in self.passes],
            "warnings": list(self.warnings),
        }


def _cleanup() -> FixedPoint:
    return FixedPoint(
        [
            (FoldConstants(), "evaluate what is known at compile time (shape arithmetic, weights)"),
            (SimplifyAlgebra(), "remove identities and compose transposes/reshapes"),
            (EliminateCommonSubexpressions(), "compute each value once"),
            (EliminateDeadCode(), "drop what no output needs"),
        ],
        cap=4,
    )


Entry = tuple[Pass, str] | FixedPoint

PIPELINES: dict[str, Any] = {
    # O0: the imported graph as is (the reference for every other pipeline).
    "O0": lambda table: [],
    # O1: cleanup only; no change of structure a person would have to re-learn.
    "O1": lambda table: [_cleanup()],
    # O2: everything, in dependency order (the layouts are the target table's).
    "O2": lambda table: [
        (
            FoldQdq(),
            "DQ -> Conv/MatMul/Gemm -> Q runs as one integer op; before the cleanup, whose "
            "constant folding would dequantize the weights",
        ),
        (MoveDequantize(), "a Concat/view/MaxPool of bytes with one scale: move bytes, then DQ"),
        (
            FoldIntegerConv(),
            "the other convs on dequantized int8 run as integer convs with a float epilogue",
        ),
        (
            FoldIntegerPool(),
            "DQ -> GlobalAveragePool -> Q sums bytes exactly (a whole-image depthwise QLinearConv)",
        ),
        _cleanup(),
        (RecomposeLayernorm(), "one LayerNormalization kernel instead of 9 ops per norm"),
        (RecomposeGelu(), "one Gelu instead of the 5-op erf form"),
        (FoldBatchnorm(), "BN is a per-channel affine: fold it into the Conv/Gemm weights"),
        (
            RecurrentSequenceFirst(),
            "a batch-first RNN/GRU/LSTM runs sequence first between transposes (Reshapes at "
            "batch 1): one layout for the emitters; before the cleanup, which folds them",
        ),
        _cleanup(),
        (BatchRecurrentInputs(), "RNN/GRU/LSTM input gates: one GEMM over the sequence"),
        (FuseHorizontal(), "siblings reading one input become one wider GEMM (read x once)"),
        (
            LowerQdq(),
            "Q/DQ left on activations become elementwise steps that fuse with their float "
            "neighbours; after the cleanups, whose x/c -> x*(1/c) would change the rounding",
        ),
        (FuseElementwise(), "epilogues and elementwise chains never write intermediates"),
        (
            MergeElementwise(),
            "a chain read only by another chain joins it (QDQ HardSwish: u8 -> u8, one kernel)",
        ),
        (ConcatBytes(), "Q(Concat(DQ(a), DQ(b))) is Concat(Q(DQ(a)), Q(DQ(b))): concat bytes"),
        (
            PoolBytes(),
            "a MaxPool of a monotone chain on bytes (a DequantizeLinear) pools the bytes first",
        ),
        (MergeElementwise(), "the chain a MaxPool moved joins the QuantizeLinear after it"),
        (
            SinkCasts(),
            "a chain ending in a byte widened to float hands the Cast to its readers: "
            "bytes between them, and a byte table for the chain's tail",
        ),
        (FuseIntegerEpilogue(), "an integer conv writes its chain's bytes, not int32"),
        (ConvRows(), "a convolution over a column runs as one over a row (tiles along W)"),
        (
            AssignLayout(candidates=table.layouts),
            f"{table.blocked_layout}/NHWC layouts for conv regions ({table.isa}: "
            f"{table.vector_width} lanes), conversions at the edges",
        ),
        (ElideConcat(), "mark concat/split/reshape the planner can place as views"),
        (EliminateDeadCode(), "drop what the rewrites left unused"),
    ],
}


def pipeline_names() -> list[str]:
    return list(PIPELINES)


def optimize(
    graph: Graph,
    pipeline: str = "O2",
    *,
    verify_each: bool = False,
    entries: list[Entry] | None = None,
    target: TargetTable | None = None,
) -> tuple[Graph, PipelineReport]:
    """Run the named pipeline (or explicit ``entries``) on a clone of ``graph``, for the
    target table ``target`` (the AVX-512 row when None: the layouts O2 always chose)."""
    if entries is None:
        if pipeline not in PIPELINES:
            raise UsageError(
                f"unknown pipeline {pipeline!r}", hint=f"Use one of: {', '.join(PIPELINES)}."
            )
        entries = PIPELINES[pipeline](target or DEFAULT_TABLE)
    g = graph.clone()
    report = PipelineReport(pipeline)
    ran: list[str] = []

    def run_one(p: Pass, why: str) -> bool:
        t0 = time.perf_counter()
        try:
            result = p.run(g)
            if verify_each:
                verify(g)
        except Exception as exc:
            before = ", ".join(ran) or "none"
            raise PassError(
                f"pass {p.name} failed (passes before it: {before}): {type(exc).__name__}: {exc}"
            ) from exc
        ran.append(p.name)
        report.passes.append(
            PassRecord(
                p.name,
                result.changed,
                dict(result.stats),
                list(result.notes),
                time.perf_counter() - t0,
                why,
            )
        )
        return result.changed

    for entry in entries:
        if isinstance(entry, FixedPoint):
            for _ in range(entry.cap):
                if not any([run_one(p, why) for p, why in entry.passes]):
                    break
            else:
                msg = (
                    f"{pipeline}: fixed point {entry.name!r} hit its cap of {entry.cap} "
                    "rounds and was still changing the graph"
                )
                report.warnings.append(msg)
                warnings.warn(msg, RuntimeWarning, stacklevel=2)
        else:
            run_one(*entry)
    # Branches and loop bodies are closed graphs (their captures are node inputs, so the
    # passes above saw every use): each gets the same pipeline as a graph of its own.
    for node in g.nodes:
        for key, sub in list(node.attrs.items()):
            if isinstance(sub, Graph):
                node.attrs[key], sub_report = optimize(
                    sub, pipeline, verify_each=verify_each, entries=entries, target=target
                )
                report.warnings.extend(sub_report.warnings)
    return g, report
