"""guard.compiler."""
