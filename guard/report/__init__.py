"""guard.report."""
