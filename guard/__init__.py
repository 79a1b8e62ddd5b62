"""guard: a regression guard for ML deployment stacks."""

__version__ = "0.1.0"
