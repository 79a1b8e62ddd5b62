"""The ``quantization`` check of an int8 row (guard.run.int8): the int8 outputs against its
fp32 source's on the same inputs. A failure names the worst tensors by per-tensor SQNR
(guard.quantize.sqnr), the first places the int8 model's values left the fp32 model's."""

from __future__ import annotations

from guard.results.result import Quantization
from guard.suite.check_blocks import QuantizationBounds


def worst_tensors_text(block: Quantization, listed: int = 3) -> str:
    worst = block.worst_tensors
    return ", ".join(f"{w.tensor} (node {w.node}, {w.sqnr_db:.1f} dB)" for w in worst[:listed])


def quantization_verdict(
    cfg: QuantizationBounds, block: Quantization
) -> tuple[str, float | None, float | None, str]:
    """(status, value, bound, message) of the int8 row against its fp32 source: top-1
    agreement, output SQNR, accuracy drop; a failure names the worst tensors."""
    agree, sqnr, drop = block.top1_agreement, block.sqnr_db, block.top1_drop
    failed, said = [], []
    if cfg.min_top1_agreement is not None:
        if agree is None:
            said.append("top-1 agreement: the first output is not a score vector")
        elif agree < cfg.min_top1_agreement:
            failed.append(f"top-1 agreement {agree:.3f} < {cfg.min_top1_agreement:g}")
        else:
            said.append(f"top-1 agreement {agree:.3f}")
    if cfg.min_sqnr_db is not None and sqnr is not None:
        if sqnr < cfg.min_sqnr_db:
            failed.append(f"output SQNR {sqnr:.1f} dB < {cfg.min_sqnr_db:g}")
        else:
            said.append(f"output SQNR {sqnr:.1f} dB")
    if cfg.max_top1_drop is not None:
        if drop is None:
            said.append("top-1 drop: no accuracy dataset (checks.accuracy) to measure it on")
        elif drop > cfg.max_top1_drop:
            failed.append(f"top-1 drop {drop:.3f} > {cfg.max_top1_drop:g}")
        else:
            said.append(f"top-1 drop {drop:.3f}")
    n = block.samples
    worst = worst_tensors_text(block)
    if failed:
        msg = "; ".join(failed) + f" (int8 vs fp32 on {n} inputs)"
        if worst:
            msg += f"; worst tensors: {worst}"
        return "fail", sqnr, cfg.min_sqnr_db, msg
    return "pass", sqnr, cfg.min_sqnr_db, "; ".join(said) + f" (int8 vs fp32 on {n} inputs)"
