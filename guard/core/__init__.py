"""guard.core: the lowest layer. Errors and their exit codes, file-system primitives (bounded
reads, atomic writes, hashes), isolation of risky steps in forked children, and the one
reader of versioned documents (schema)."""
