"""guard.golden."""
