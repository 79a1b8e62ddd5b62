"""guard.compare: comparison documents, baselines, history, attribution, reports."""
