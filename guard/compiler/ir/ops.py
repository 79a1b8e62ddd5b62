"""Op traits: one table, one row per IR op.

Every pass, the memory planner, the layout pass and the code generator ask this table
what an op is, instead of keeping their own sets:

- ``family``: the op's kind. ``unary``, ``binary`` (broadcasting arithmetic), ``compare``
  (broadcasting, bool out), ``select`` (Where), ``cast`` are the elementwise families that
  fuse_elementwise chains; the others name the kernel family (conv, gemm, pool, norm,
  reduce, tensor, ...).
- ``inplace``: the output may be written over an input of the same shape and dtype (every
  output element depends only on the input elements at the same index).
- ``view``: how the output may share the input's bytes: ``alias`` (same bytes, new shape),
  ``concat`` / ``split`` / ``slice`` (contiguous sub-ranges). The memory planner decides
  whether it does (guard.compiler.graph.memory); this says only that it may.
- ``layout``: the op reads its first input and writes its output in ``attrs["layout"]``
  (NCHW, NHWC, NCHW16c) when the layout pass gives it one.
- ``reduction``: the op reduces over axes (its output has fewer elements).
- ``control_flow``: the op runs a subgraph (If/Loop/Scan). If and Loop run on the host,
  each branch or body compiled as a graph of its own; the importer refuses Scan.

Hazard: ``inplace`` is about element dependence only; the planner also requires that no
other reader of the input comes later and that the input is not a graph output.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class OpTraits:
    family: str
    inplace: bool = False
    view: str = ""  # "", "alias", "concat", "split", "slice"
    layout: bool = False
    reduction: bool = False
    control_flow: bool = False

    @property
    def elementwise(self) -> bool:
        return self.family in ELEMENTWISE_FAMILIES


ELEMENTWISE_FAMILIES = frozenset({"unary", "binary", "compare", "select", "cast"})


def _rows(family: str, names: str, **kw: object) -> dict[str, OpTraits]:
    return {n: OpTraits(family, **kw) for n in names.split()}  # type: ignore[arg-type]


# Inplace-safe elementwise ops: float math that reads one element per output element.
_UNARY_INPLACE = (
    "Relu LeakyRelu Sigmoid Tanh Clip Exp Log Neg Abs Sqrt Erf Gelu HardSigmoid HardSwish "
    "Elu Selu Softplus Reciprocal"
)
_UNARY_OTHER = (
    "Floor Ceil Sin Cos Tan Asin Acos Atan Sinh Cosh Asinh Acosh Atanh Sign Round Softsign "
    "Not Mish ThresholdedRelu Celu Shrink BitwiseNot Swish"
)

TRAITS: dict[str, OpTraits] = {
    **_rows("unary", _UNARY_INPLACE, inplace=True),
    **_rows("unary", _UNARY_OTHER),
    "Identity": OpTraits("unary", view="alias"),
    **_rows("binary", "Add Sub Mul Div Pow Max Min", inplace=True),
    **_rows("binary", "Mod PRelu BitShift BitwiseAnd BitwiseOr BitwiseXor"),
    **_rows("compare", "Equal Less Greater LessOrEqual GreaterOrEqual And Or Xor"),
    "Where": OpTraits("select", inplace=True),
    "Cast": OpTraits("cast", inplace=True),
    "FusedElementwise": OpTraits("fused_elementwise", inplace=True),
    # Convolution and matrix products (the Fused* variants carry an epilogue program).
    **_rows("conv", "Conv FusedConv", layout=True),
    **_rows("conv", "ConvTranspose ConvTransposeInteger ConvInteger QLinearConv"),
    **_rows("conv", "FusedConvInteger FusedConvTransposeInteger"),
    **_rows("gemm", "Gemm FusedGemm MatMul FusedMatMul MatMulInteger QLinearMatMul Einsum"),
    # Pooling.
    **_rows("pool", "MaxPool AveragePool GlobalAveragePool GlobalMaxPool", layout=True),
    "LpPool": OpTraits("pool"),
    # Normalisation and friends: same shape out, reduce over some axes internally.
    "BatchNormalization": OpTraits("norm", inplace=True),
    **_rows(
        "norm",
        "Softmax LogSoftmax Hardmax LayerNormalization LRN InstanceNormalization "
        "GroupNormalization RMSNormalization MeanVarianceNormalization LpNormalization",
    ),
    # Reductions.
    **_rows(
        "reduce",
        "ReduceMean ReduceSum ReduceMax ReduceMin ReduceProd ReduceL1 ReduceL2 ReduceLogSum "
        "ReduceLogSumExp ReduceSumSquare ArgMax ArgMin TopK",
        reduction=True,
    ),
    **_rows("scan", "CumSum CumProd"),
    # Data movement.
    "Reshape": OpTraits("tensor", view="alias"),
    "Concat": OpTraits("tensor", view="concat"),
    "Split": OpTraits("tensor", view="split"),
    "Slice": OpTraits("tensor", view="slice"),
    **_rows(
        "tensor",
        "Transpose Relayout Pad Expand Tile Gather GatherElements GatherND ScatterElements "
        "ScatterND OneHot Trilu ReverseSequence BitCast Fill",
    ),
    **_rows("resize", "Resize GridSample"),
    # Quantisation, recurrent, misc.
    **_rows("quant", "QuantizeLinear DequantizeLinear DynamicQuantizeLinear"),
    **_rows("recurrent", "LSTM GRU RNN"),
    **_rows("misc", "IsInf IsNaN DFT Det NegativeLogLikelihoodLoss"),
    **_rows("control", "If Loop Scan", control_flow=True),
}


def traits(op: str) -> OpTraits:
    """The row for ``op``; KeyError names the op (every IR op has one: tests check)."""
    try:
        return TRAITS[op]
    except KeyError:
        raise KeyError(f"op {op!r} has no row in guard.compiler.ir.ops.TRAITS") from None


def ops_where(**want: object) -> frozenset[str]:
    """Ops whose traits match every ``field=value`` given (``elementwise=True`` works too)."""
    return frozenset(
        op for op, t in TRAITS.items() if all(getattr(t, k) == v for k, v in want.items())
    )


def family(name: str) -> frozenset[str]:
    return ops_where(family=name)


ELEMENTWISE_OPS = ops_where(elementwise=True)
INPLACE_OPS = ops_where(inplace=True)
ALIAS_OPS = ops_where(view="alias")
LAYOUT_OPS = ops_where(layout=True)
CONTROL_FLOW_OPS = ops_where(control_flow=True)
