"""guard.bench."""
