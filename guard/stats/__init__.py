"""guard.stats: every verdict-making statistic.

- verdicts: the verdict names, the judging config and the unpaired test
- paired: interleaved A/B in one process (paired test, adaptive driver)
- rounds_stats: two results files judged on their rounds, adjusted for host speed
- regress: the regression rule, over the three designs (rounds, unpaired, paired)
- calibrate: noise calibration, A/A comparisons of an artefact against itself

The counted verdict (exact, no p-value) is guard.counting.verdict.
"""
