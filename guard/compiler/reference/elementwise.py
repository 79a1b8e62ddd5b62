"""Reference kernels for elementwise ops, and the interpreter of fused elementwise programs.

A fused program (``FusedElementwise``, and the epilogue of ``FusedConv``/``FusedGemm``/
``FusedMatMul``) is a list of steps ``{"op", "args", "attrs"}``; an arg is an int (the
node's input at that index), ``"s<k>"`` (the result of step k) or ``"acc"`` (the anchor's
result). The node's output is the last step's result.
"""

from __future__ import annotations

from collections.abc import Callable

import ml_dtypes
import numpy as np

from guard.compiler.ir.core import dtype_from_name, is_float
from guard.compiler.reference.base import Attrs, Xs, arg


def _erf(x: np.ndarray) -> np.ndarray:
    from scipy import special  # imported on first use: keeps `import guard.compiler` light

    return special.erf(x).astype(x.dtype, copy=False)


def _gelu(x: np.ndarray, a: Attrs) -> np.ndarray:
    if a.get("approximate", "none") == "tanh":
        c = np.asarray(np.sqrt(2.0 / np.pi), x.dtype)
        return (0.5 * x * (1 + np.tanh(c * (x + np.asarray(0.044715, x.dtype) * x**3)))).astype(
            x.dtype
        )
    return (0.5 * x * (1 + _erf(x / np.asarray(np.sqrt(2.0), x.dtype)))).astype(x.dtype)


def _clip(x: np.ndarray, a: Attrs) -> np.ndarray:
    lo, hi = a.get("min"), a.get("max")
    out = x
    if lo is not None:
        out = np.maximum(out, np.asarray(lo, x.dtype))
    if hi is not None:
        out = np.minimum(out, np.asarray(hi, x.dtype))
    return out


def _round(x: np.ndarray) -> np.ndarray:
    return np.round(x)  # numpy rounds half to even, as ONNX specifies


def _cast(x: np.ndarray, a: Attrs) -> np.ndarray:
    to = dtype_from_name(a["to"])
    if a["to"].startswith("f8") and a.get("saturate", 1) and x.dtype.kind in "fV":
        # Saturating float8 cast: out-of-range values and infinities clamp to the largest
        # finite value; NaN stays NaN.

        big = float(ml_dtypes.finfo(to).max)
        return np.clip(x.astype(np.float32), -big, big).astype(to)
    return x.astype(to)


def _f(x: np.ndarray, v: float) -> np.ndarray:
    return np.asarray(v, dtype=x.dtype)


UNARY_FNS: dict[str, Callable[[np.ndarray, Attrs], np.ndarray]] = {
    "Identity": lambda x, a: x,
    "Relu": lambda x, a: np.maximum(x, _f(x, 0)),
    "Sigmoid": lambda x, a: (1 / (1 + np.exp(-x))).astype(x.dtype),
    "Tanh": lambda x, a: np.tanh(x),
    "Exp": lambda x, a: np.exp(x),
    "Log": lambda x, a: np.log(x),
    "Sqrt": lambda x, a: np.sqrt(x),
    "Neg": lambda x, a: np.negative(x),
    "Abs": lambda x, a: np.abs(x),
    "Erf": lambda x, a: _erf(x),
    "Reciprocal": lambda x, a: np.reciprocal(x),
    "Floor": lambda x, a: np.floor(x),
    "Ceil": lambda x, a: np.ceil(x),
    "Sin": lambda x, a: np.sin(x),
    "Cos": lambda x, a: np.cos(x),
    "Tan": lambda x, a: np.tan(x),
    "Asin": lambda x, a: np.arcsin(x),
    "Acos": lambda x, a: np.arccos(x),
    "Atan": lambda x, a: np.arctan(x),
    "Sinh": lambda x, a: np.sinh(x),
    "Cosh": lambda x, a: np.cosh(x),
    "Asinh": lambda x, a: np.arcsinh(x),
    "Acosh": lambda x, a: np.arccosh(x),
    "Atanh": lambda x, a: np.arctanh(x),
    "Sign": lambda x, a: np.sign(x),
    "Round": lambda x, a: _round(x),
    "Not": lambda x, a: np.logical_not(x),
    "BitwiseNot": lambda x, a: np.bitwise_not(x),
    "LeakyRelu": lambda x, a: np.where(x >= 0, x, x * _f(x, a.get("alpha", 0.01))),
    "Elu": lambda x, a: np.where(x > 0, x, _f(x, a.get("alpha", 1.0)) * (np.exp(x) - 1)),
    "Celu": lambda x, a: (
        np.maximum(x, 0)
        + np.minimum(0, _f(x, a.get("alpha", 1.0)) * (np.exp(x / _f(x, a.get("alpha", 1.0))) - 1))
    ).astype(x.dtype),  # noqa: E501
    "Selu": lambda x, a: (
        _f(x, a.get("gamma", 1.0507009873554805))
        * np.where(x > 0, x, _f(x, a.get("alpha", 1.6732632423543772)) * (np.exp(x) - 1))
    ),
    "ThresholdedRelu": lambda x, a: np.where(x > _f(x, a.get("alpha", 1.0)), x, _f(x, 0)),
    "HardSigmoid": lambda x, a: np.clip(
        x * _f(x, a.get("alpha", 0.2)) + _f(x, a.get("beta", 0.5)), _f(x, 0), _f(x, 1)
    ),  # noqa: E501
    "HardSwish": lambda x, a: x * np.clip(x / _f(x, 6) + _f(x, 0.5), _f(x, 0), _f(x, 1)),
    "Softplus": lambda x, a: np.log1p(np.exp(x)).astype(x.dtype),
    "Softsign": lambda x, a: (x / (1 + np.abs(x))).astype(x.dtype),
    "Mish": lambda x, a: (x * np.tanh(np.log1p(np.exp(x)))).astype(x.dtype),
    "Shrink": lambda x, a: np.where(
        x < -_f(x, a.get("lambd", 0.5)),
        x + _f(x, a.get("bias", 0.0)),
        np.where(x > _f(x, a.get("lambd", 0.5)), x - _f(x, a.get("bias", 0.0)), _f(x, 0)),
    ),
    "Swish": lambda x, a: (x / (1 + np.exp(-_f(x, a.get("alpha", 1.0)) * x))).astype(x.dtype),
    "Clip": _clip,
    "Gelu": _gelu,
    "Cast": lambda x, a: _cast(x, a),
}


def _div(x: np.ndarray, y: np.ndarray, a: Attrs) -> np.ndarray:
    if x.dtype.kind in "iu":
        # ONNX integer division truncates toward zero (as C does); numpy floors.
        return np.trunc(np.divide(x, np.where(y == 0, 1, y))).astype(x.dtype)
    return np.divide(x, y)


def _mod(x: np.ndarray, y: np.ndarray, a: Attrs) -> np.ndarray:
    if a.get("fmod", 0):
        return np.fmod(x, y)
    return np.mod(x, y)


def _pow(x: np.ndarray, y: np.ndarray, a: Attrs) -> np.ndarray:
    if is_float(x.dtype):
        return np.power(x, y.astype(x.dtype)).astype(x.dtype)
    return np.power(x.astype(np.int64), y.astype(np.int64)).astype(x.dtype)


def _prelu(x: np.ndarray, s: np.ndarray, a: Attrs) -> np.ndarray:
    return np.where(x >= 0, x, x * s).astype(x.dtype)


def _bitshift(x: np.ndarray, y: np.ndarray, a: Attrs) -> np.ndarray:
    return np.left_shift(x, y) if a["direction"] == "LEFT" else np.right_shift(x, y)


BINARY_FNS: dict[str, Callable[[np.ndarray, np.ndarray, Attrs], np.ndarray]] = {
    "Add": lambda x, y, a: np.add(x, y),
    "Sub": lambda x, y, a: np.subtract(x, y),
    "Mul": lambda x, y, a: np.multiply(x, y),
    "Div": _div,
    "Pow": _pow,
    "Max": lambda x, y, a: np.maximum(x, y),
    "Min": lambda x, y, a: np.minimum(x, y),
    "Mod": _mod,
    "PRelu": _prelu,
    "BitShift": _bitshift,
    "BitwiseAnd": lambda x, y, a: np.bitwise_and(x, y),
    "BitwiseOr": lambda x, y, a: np.bitwise_or(x, y),
    "BitwiseXor": lambda x, y, a: np.bitwise_xor(x, y),
    "Equal": lambda x, y, a: np.equal(x, y),
    "Less": lambda x, y, a: np.less(x, y),
    "Greater": lambda x, y, a: np.greater(x, y),
    "LessOrEqual": lambda x, y, a: np.less_equal(x, y),
    "GreaterOrEqual": lambda x, y, a: np.greater_equal(x, y),
    "And": lambda x, y, a: np.logical_and(x, y),
    "Or": lambda x, y, a: np.logical_or(x, y),
    "Xor": lambda x, y, a: np.logical_xor(x, y),
}


def apply(op: str, args: list[np.ndarray], attrs: Attrs) -> np.ndarray:
    """Apply one elementwise op; the result keeps numpy's dtype rules (checked by callers)."""
    with np.errstate(all="ignore"):
        if op in UNARY_FNS:
            out = UNARY_FNS[op](args[0], attrs)
        elif op in BINARY_FNS:
            out = BINARY_FNS[op](args[0], args[1], attrs)
        elif op == "Where":
            out = np.where(args[0], args[1], args[2])
        else:
            raise KeyError(op)
    out = np.asarray(out)
    if op in (
        "Equal",
        "Less",
        "Greater",
        "LessOrEqual",
        "GreaterOrEqual",
        "And",
        "Or",
        "Xor",
        "Not",
    ):
        return out
    want = (
        args[1].dtype
        if op == "Where"
        else (dtype_from_name(attrs["to"]) if op == "Cast" else args[0].dtype)
    )
    return out.astype(want, copy=False)


def run_program(program: list[Attrs], inputs: Xs, acc: np.ndarray | None) -> np.ndarray:
    """A FusedElementwise ``program``: each step ``{op, args, attrs}`` applies ``op`` to its
    args (an input index, ``"acc"``, or ``"sK"``, step K's result); the last step's value."""
    steps: list[np.ndarray] = []

    def operand(ref: int | str) -> np.ndarray:
        if ref == "acc":
            assert acc is not None, "an epilogue reads acc outside a fused anchor"
            return acc
        return steps[int(ref[1:])] if isinstance(ref, str) else arg(inputs, ref)

    for step in program:
        steps.append(apply(step["op"], [operand(r) for r in step["args"]], step.get("attrs", {})))
    return steps[-1]


ELEMENTWISE_OPS = set(UNARY_FNS) | set(BINARY_FNS) | {"Where"}


def kernel(op: str) -> Callable[[list[np.ndarray | None], Attrs], list[np.ndarray]]:
    def k(xs: list[np.ndarray | None], a: Attrs) -> list[np.ndarray]:
        if op == "Clip" and len(xs) > 1:  # min/max that were not constants at import
            a = dict(a)
            for key, x in zip(("min", "max"), xs[1:3], strict=False):
                if x is not None:
                    a[key] = x
            xs = xs[:1]
        return [apply(op, [x for x in xs if x is not None], a)]

    return k


def fused_elementwise(xs: list[np.ndarray | None], a: Attrs) -> list[np.ndarray]:
    return [run_program(a["program"], xs, None)]


def is_nan(xs: Xs, a: Attrs) -> list[np.ndarray]:
    return [np.isnan(arg(xs))]


def is_inf(xs: Xs, a: Attrs) -> list[np.ndarray]:
    x = arg(xs)
    pos = np.isposinf(x) if a.get("detect_positive", 1) else np.zeros(x.shape, bool)
    neg = np.isneginf(x) if a.get("detect_negative", 1) else np.zeros(x.shape, bool)
    return [pos | neg]


def bit_cast(xs: Xs, a: Attrs) -> list[np.ndarray]:
    x = arg(xs)
    return [np.asarray(x, order="C").view(dtype_from_name(a["to"]))]


# Elementwise in shape but outside the fusable table above: a boolean test and a
# reinterpretation of the bytes.
KERNELS = {"IsNaN": is_nan, "IsInf": is_inf, "BitCast": bit_cast}
