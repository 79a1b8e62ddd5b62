"""guard.compare: baselines, comparisons, interleaved A/B, dependency bumps, history."""
