"""guard.experiment: the suite under two conditions, timed side by side on one runner.

- ab: interleaved A/B in one process, judged on paired ratios
- ab_ref: ``guard ab --base-ref``: two commits, each in its own checkout and environment
- ab_worker: one side of ab_ref (run by path under the side's interpreter)
- bump: ``guard bump``: one dependency pin before and after, in isolated venvs
- bisect: ``guard bisect``: the first regressed commit, by ab_ref steps
"""
