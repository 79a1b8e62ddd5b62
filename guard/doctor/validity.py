"""Whether two results can be compared at all, decided before any step ranks a cause.

A kernel "5.6x slower" means nothing when the rounds of the run it came from disagree by
81%, or when the model itself changed between the sides. Three facts make a comparison
invalid, and the doctor reports them first (its headline, step 1) and demotes every later
step's "cause found" to "suspect":

- the model (``manifest.model.sha256``) or the inputs (``numerics.inputs_sha256``) differ:
  the sides ran different work;
- the host class (``manifest.host`` arch, cpu, cores) differs: different machines;
- the noise is at or above the effect: a side's ``noise_pct`` (100 x SD of its round
  medians' logs) is at least the p50 change, or the change is below what the noise hides.

What the noise hides is the half-width of a 95% interval on the difference of the two
sides' mean log round medians: ``2 * sqrt(nb^2 / rb + nh^2 / rh)`` percent, with ``n`` the
noise and ``r`` the rounds of each side (one side alone: ``2 * nh / sqrt(rh)``).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, TypedDict

from guard.core.json_types import Json
from guard.doctor.facts import Side
from guard.results.result import Result

HOST_FIELDS = ("arch", "cpu", "cores")


def _p50(s: Side | None) -> float | None:
    return s.r.latency_ms.p50 if s is not None and s.r.latency_ms is not None else None


def host_class(r: Result) -> dict[str, str | int | None]:
    """The result's HOST_FIELDS, by name."""
    h = r.manifest.host
    return {"arch": h.arch, "cpu": h.cpu, "cores": h.cores}


def p50_ratio(base: Side | None, head: Side) -> float | None:
    """head/base p50, when both sides measured one."""
    b, h = _p50(base), _p50(head)
    return h / b if b and h else None


def _rounds(s: Side) -> int:
    n = len(s.r.rounds) if s.r.rounds else s.r.measurement.rounds
    return int(n) if n is not None and n >= 1 else 1


def hidden_pct(base: Side | None, head: Side) -> float | None:
    """The smallest p50 change (percent) the sides' round noise lets through; None when a
    side's noise is not recorded."""
    sides = [s for s in (base, head) if s is not None]
    noise = [s.r.noise_pct for s in sides]
    known = [n for n in noise if n is not None]
    if len(known) != len(noise):
        return None
    return 2.0 * math.sqrt(sum(n**2 / _rounds(s) for n, s in zip(known, sides, strict=True)))


def _short(v: Any) -> Any:
    return v[:12] if isinstance(v, str) else v


class InvalidFactJson(TypedDict):
    fact: str
    base: Json
    head: Json
    why: str


class ValidityJson(TypedDict):
    """A case's ``validity`` in the doctor document."""

    valid: bool
    invalid: list[InvalidFactJson]
    effect_pct: float | None
    noise_pct: list[float | None]  # [base, head]
    hidden_below_pct: float | None


@dataclass(frozen=True)
class InvalidFact:
    """A fact that makes the comparison invalid: its two values and why it does."""

    fact: str
    base: Any
    head: Any
    why: str

    def to_dict(self) -> InvalidFactJson:
        return {"fact": self.fact, "base": self.base, "head": self.head, "why": self.why}


@dataclass(frozen=True)
class Validity:
    """Whether two results can be compared: the facts that make the comparison invalid,
    most basic first, the p50 change, each side's noise and the effect the noise hides."""

    invalid: tuple[InvalidFact, ...]
    effect_pct: float | None
    noise_pct: tuple[float | None, float | None]  # (base, head)
    hidden_below_pct: float | None

    @property
    def valid(self) -> bool:
        return not self.invalid

    def to_dict(self) -> ValidityJson:
        """The case's ``validity`` in the doctor document: ``{"valid", "invalid": [{"fact",
        "base", "head", "why"}], "effect_pct", "noise_pct": [base, head],
        "hidden_below_pct"}``."""
        return {
            "valid": self.valid,
            "invalid": [i.to_dict() for i in self.invalid],
            "effect_pct": self.effect_pct,
            "noise_pct": list(self.noise_pct),
            "hidden_below_pct": self.hidden_below_pct,
        }


def validity(base: Side | None, head: Side) -> Validity:
    """The facts that make the comparison invalid, most basic first, and the size of
    effect the noise hides."""
    invalid: list[InvalidFact] = []
    if base is not None:
        for fact, b, h, why in (
            ("model sha256", base.r.manifest.model.sha256, head.r.manifest.model.sha256,
             "the model changed: the sides ran different graphs, so any step's difference "
             "may be the model's"),
            ("inputs sha256", base.r.numerics.inputs_sha256, head.r.numerics.inputs_sha256,
             "the inputs changed: the sides ran different data"),
        ):  # fmt: skip
            if b is not None and h is not None and b != h:
                invalid.append(InvalidFact(fact, _short(b), _short(h), why))
        hb, hh = host_class(base.r), host_class(head.r)
        diff = [
            k for k in HOST_FIELDS if hb[k] is not None and hh[k] is not None and hb[k] != hh[k]
        ]
        if diff:
            invalid.append(InvalidFact(f"host class ({', '.join(diff)})", hb, hh,
                                       "another host class: latencies of different machines"))  # fmt: skip
    ratio = p50_ratio(base, head)
    effect = abs(ratio - 1.0) * 100.0 if ratio is not None else None
    noise = (base.r.noise_pct if base else None, head.r.noise_pct)
    hidden = hidden_pct(base, head)
    loudest = max((n for n in noise if isinstance(n, int | float)), default=None)
    if (
        effect is not None
        and loudest is not None
        and (loudest >= effect or (hidden is not None and hidden >= effect))
    ):
        invalid.append(InvalidFact(
            "noise_pct", noise[0], noise[1],
            f"the noise is at or above the effect: rounds disagree by up to "
            f"{loudest:.0f}% against a p50 change of {effect:.1f}%"
            + (f"; effects below {hidden:.0f}% are hidden" if hidden is not None else ""),
        ))  # fmt: skip
    return Validity(tuple(invalid), effect, noise, hidden)


def summary(v: Validity) -> str:
    """One line: why the comparison is not valid, and what the noise hides."""
    parts = [f"{i.fact} ({i.why})" for i in v.invalid]
    hidden = v.hidden_below_pct
    tail = f"noise hides effects below {hidden:.0f}%" if isinstance(hidden, int | float) else ""
    if not parts:
        return f"comparison valid; {tail}" if tail else "comparison valid"
    return "comparison not valid: " + "; ".join(parts) + (f"; {tail}" if tail else "")
