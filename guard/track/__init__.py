"""guard.track."""
