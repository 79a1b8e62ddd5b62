"""guard.compiler.graph: planning over the graph. The planning view and liveness, grouping
into partitions, a memory-aware schedule, and memory planning into one arena (aliasing,
placement)."""
