"""guard reduce: delta debugging a failing model down to a small reproducer bundle."""

from guard.reduce.reduce import NotReproduced, reduce_command, reduce_model

__all__ = ["NotReproduced", "reduce_command", "reduce_model"]
