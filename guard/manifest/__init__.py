"""guard.manifest."""
