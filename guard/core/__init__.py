"""guard.core: the lowest layer. Errors and their exit codes, file-system primitives (bounded
reads, atomic writes, hashes), isolation of risky steps in forked children, the one reader
of versioned documents (schema), and the results file's one loader (results_file) and one
key (result_key), which tracking needs below the results package."""
