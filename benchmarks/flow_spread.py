"""How far apart two `guard run` processes land, against what guard's intervals assume.

Reads flow_power.py results files and prints, per condition and model, from the A/A pairs
(two base processes, nothing changed):

- ``sd``: the spread of the estimate guard's comparison made (the adjusted log ratio)
  over the pairs: the noise the two-process flow really has on this machine in that hour;
- ``se``: the median standard error guard's intervals used (the CI's half width over the
  one-sided normal quantile of alpha; the t quantile guard uses is a little larger, so
  this is an upper bound);
- ``rounds``: the part of that standard error the rounds themselves measured (``se``
  without the two sides' default run noise);
- ``sd/se``: above 1, guard's intervals were narrower than the machine's spread, below 1
  wider;
- whether ``sd`` allows must-have 5's targets at all: a test that flags at most 1% of A/A
  pairs (one-sided alpha 0.01) catches a slowdown of r with power P only when
  log(1 + r) >= (z(0.99) + z(P)) x sd, so +5% at 80% needs sd <= 1.54% and +10% at 95%
  needs sd <= 2.40%, whatever test is put on this estimate.

    .venv/bin/python benchmarks/flow_spread.py benchmarks/results/flow_power_*.json

Files from before rows carried their CI are read off the row's reason ("CI [lo%, hi%]").
"""

from __future__ import annotations

import argparse
import json
import math
import re
import statistics
import sys
from pathlib import Path

from scipy import stats

from guard.stats.verdicts import DEFAULT_RUN_NOISE_PCT, RegressConfig

_CI = re.compile(r"CI \[([-+\d.]+)%, ([-+\d.]+)%\]")
ALPHA = RegressConfig().alpha
TARGETS = ((0.05, 0.80), (0.10, 0.95))


def needed_sd(slowdown: float, power: float, alpha: float = ALPHA) -> float:
    """The largest spread of the estimate at which any level-alpha test has this power."""
    return math.log1p(slowdown) / (stats.norm.ppf(1 - alpha) + stats.norm.ppf(power))


def half_width(row: dict) -> float | None:
    """Half the width of the row's CI in log ratio, or None where it has none."""
    ci = row.get("ci")
    if ci is None:
        m = _CI.search(row.get("reason") or "")
        if m is None:
            return None
        ci = [1 + float(m.group(1)) / 100, 1 + float(m.group(2)) / 100]
    lo, hi = ci
    if not (lo and hi and lo > 0 and hi > 0 and math.isfinite(lo) and math.isfinite(hi)):
        return None
    return (math.log(hi) - math.log(lo)) / 2


def spread(rows: list[dict]) -> dict[str, dict]:
    """Per model: pairs, realised sd, median se, its rounds part, sd/se."""
    z = stats.norm.ppf(1 - ALPHA)
    run2 = 2 * math.log1p(DEFAULT_RUN_NOISE_PCT / 100) ** 2
    out: dict[str, dict] = {}
    for model in dict.fromkeys(r["model"] for r in rows):
        est, ses = [], []
        for r in rows:
            if r["model"] != model or not (r.get("ratio") or 0) > 0:
                continue
            est.append(math.log(r["ratio"]))
            hw = half_width(r)
            if hw is not None:
                ses.append(hw / z)
        if len(est) < 3 or not ses:
            continue
        sd, se = statistics.stdev(est), statistics.median(ses)
        out[model] = {
            "pairs": len(est),
            "sd_pct": sd * 100,
            "se_pct": se * 100,
            "rounds_se_pct": math.sqrt(max(se * se - run2, 0.0)) * 100,
            "sd_over_se": sd / se if se > 0 else math.inf,
        }
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("files", nargs="+", type=Path, help="flow_power.py results files")
    args = ap.parse_args(argv)
    limits = [needed_sd(r, p) for r, p in TARGETS]
    print(
        "A/A spread of guard's estimate vs the largest at which any test meets the targets: "
        + ", ".join(
            f"+{r:.0%} at {p:.0%}: sd <= {s * 100:.2f}%"
            for (r, p), s in zip(TARGETS, limits, strict=True)
        )
    )
    print(f"{'file':34s} {'condition':13s} {'model':13s} pairs    sd    se rounds sd/se  targets")
    for f in args.files:
        try:
            doc = json.loads(f.read_text())
        except (OSError, ValueError) as e:
            print(f"{f}: cannot read it as a flow_power.py results file ({e})", file=sys.stderr)
            return 2
        for c in doc.get("conditions", []):
            for model, s in spread(c["aa"]["rows"]).items():
                ok = "".join("y" if s["sd_pct"] <= lim * 100 else "n" for lim in limits)
                print(
                    f"{f.name[:34]:34s} {c['condition']:13s} {model:13s} {s['pairs']:5d} "
                    f"{s['sd_pct']:5.2f} {s['se_pct']:5.2f} {s['rounds_se_pct']:6.2f} "
                    f"{s['sd_over_se']:5.2f}  {ok}"
                )
    return 0


if __name__ == "__main__":
    sys.exit(main())
