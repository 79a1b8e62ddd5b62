"""guard.zoo."""
