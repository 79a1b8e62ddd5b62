"""A model entry's ``quantize:`` block and the int8 entry it adds beside the fp32 one.

```yaml
models:
  - name: cls
    source: cls.onnx
    quantize: {calibration: calib.npz, method: percentile, per_channel: true,
               symmetric: false, keep_fp32: [Softmax]}
    checks:
      quantization: {min_top1_agreement: 0.99, min_sqnr_db: 20, max_top1_drop: 0.01}
      int8_agreement: {across: [host, "llvm -mcpu=x86-64-v3"]}
```

``calibration`` is a path relative to the suite (an .npz, a directory of .npy/.npz, an
ONNX test_data_set_N directory; guard.quantize.calibration) or ``inputs``: the entry's own
seeded inputs, ``INPUT_SAMPLES`` of them (seeds seed, seed+1, ...). The block adds a second
entry, ``<name>.int8`` (``int8_name``), with the same source, inputs, backends, targets and
checks (a tolerance of ``INT8_TOLERANCE`` when the suite sets none): guard.run builds its
model from the fp32 source and runs it as its own result row; the fp32 row is unchanged.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypedDict

from guard.core.json_types import JsonObject
from guard.suite.fields import Fields, show

QUANTIZE_KEYS = {"calibration", "method", "per_channel", "symmetric", "keep_fp32"}
METHODS = ("minmax", "percentile", "entropy")  # guard.quantize.ranges.METHODS
INPUT_SAMPLES = 32
INT8_SUFFIX = ".int8"
# The int8 row's tolerance against its golden when the suite sets none: two backends round
# a value on a quantisation boundary differently (accumulation order), and one step moves
# the outputs by ~1e-2 (PP-OCR cls: 7.2e-3 bundled vs onnxruntime). The accuracy gate is
# checks.quantization; the bit-exact one is checks.int8_agreement.
INT8_TOLERANCE = {"rtol": 1e-2, "atol": 1e-2}


class QuantizeJson(TypedDict):
    """A ``quantize:`` block as a reproducer's suite writes it back."""

    calibration: str
    method: str
    per_channel: bool
    symmetric: bool
    keep_fp32: list[str]


@dataclass(frozen=True)
class QuantizeSpec:
    """A validated ``quantize:`` block; ``calibration`` is absolute, or "inputs"."""

    calibration: str
    method: str = "percentile"
    per_channel: bool = True
    symmetric: bool = False
    keep_fp32: tuple[str, ...] = ()
    source_model: str = ""  # the fp32 entry's name

    def to_dict(self) -> QuantizeJson:
        return {
            "calibration": self.calibration,
            "method": self.method,
            "per_channel": self.per_channel,
            "symmetric": self.symmetric,
            "keep_fp32": list(self.keep_fp32),
        }


def int8_name(name: str) -> str:
    return name + INT8_SUFFIX


def parse_quantize(ctx: Fields, raw: Any, key: str, suite_dir: Path, model: str) -> QuantizeSpec:
    body = ctx.mapping(raw, key, QUANTIZE_KEYS)
    if not isinstance(raw, dict) or "calibration" not in body:
        raise ctx.err(
            key,
            "needs 'calibration'",
            "e.g. quantize: {calibration: calib.npz} (a path relative to the suite, or "
            "'inputs' for the entry's seeded inputs).",
        )
    cal = body["calibration"]
    if not isinstance(cal, str) or not cal:
        raise ctx.err(f"{key}.calibration", f"expected a path or 'inputs', got {show(cal)}")
    if cal != "inputs":
        p = Path(cal)
        p = p if p.is_absolute() else (suite_dir / p)
        if not p.exists():
            raise ctx.err(
                f"{key}.calibration",
                f"{p} does not exist",
                "Paths are relative to the suite file; or use 'inputs'.",
            )
        cal = str(p.resolve())
    method = body.get("method", "percentile")
    if method not in METHODS:
        raise ctx.err(f"{key}.method", f"expected one of {', '.join(METHODS)}, got {show(method)}")
    flags = {}
    for k, default in (("per_channel", True), ("symmetric", False)):
        v = body.get(k, default)
        if not isinstance(v, bool):
            raise ctx.err(f"{key}.{k}", f"is true or false, got {show(v)}")
        flags[k] = v
    keep = body.get("keep_fp32", [])
    if isinstance(keep, str):
        keep = [keep]
    if not isinstance(keep, list) or not all(isinstance(k, str) and k for k in keep):
        raise ctx.err(
            f"{key}.keep_fp32", f"expected a list of op types or node names, got {show(keep)}"
        )
    return QuantizeSpec(cal, method, flags["per_channel"], flags["symmetric"], tuple(keep), model)


def parse_quantization_check(ctx: Fields, body: JsonObject, key: str) -> dict[str, float]:
    """``checks.quantization``: fractions in [0, 1] and an SQNR in dB."""
    out: dict[str, float] = {}
    for k, v in body.items():
        kk = f"{key}.{k}"
        if k == "min_sqnr_db":
            out[k] = ctx.number(v, kk)
        else:
            f = ctx.number(v, kk, minimum=0.0)
            if f > 1.0:
                raise ctx.err(kk, f"is a fraction in [0, 1], got {show(v)}")
            out[k] = f
    return out


def parse_int8_agreement(ctx: Fields, body: JsonObject, key: str) -> dict[str, list[str]]:
    across = body.get("across")
    if (
        not isinstance(across, list)
        or len(across) < 2
        or not all(isinstance(t, str) and t for t in across)
    ):
        raise ctx.err(
            f"{key}.across",
            f"expected a list of two or more targets, got {show(across)}",
            'e.g. int8_agreement: {across: [host, "llvm -mcpu=x86-64-v3"]}',
        )
    return {"across": list(across)}


def option_calibration(ctx: Fields, value: Any, key: str, suite_dir: Path | None) -> str:
    """``options.<backend>.calibration`` (the memory ladder's int8 rung data, issue 35): an
    existing path, relative to the suite file, made absolute."""
    hint = "e.g. options: {bundled: {memory_budget: 2MiB, calibration: calib.npz}}."
    if not isinstance(value, str) or not value.strip() or "\x00" in value:
        raise ctx.err(f"{key}.calibration", f"expected a path, got {show(value)}", hint)
    p = Path(value)
    if not p.is_absolute() and suite_dir is not None:
        p = suite_dir / p
    if not p.exists():
        raise ctx.err(f"{key}.calibration", f"{p} does not exist",
                      "Paths are relative to the suite file; " + hint)  # fmt: skip
    return str(p.resolve())
