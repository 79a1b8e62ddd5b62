"""guard.checks: each gate of a result judged from its facts (guard.checks.evaluate), and
the one place a result of the results contract is assembled with its verdict
(guard.checks.assemble). It sits above measure and stats, whose figures the checks judge;
the records it writes are read back through guard.results."""
