"""guard.compiler.passes."""
