"""guard.results: one result of the results contract, and its checks (each gate records its
value, bound, status and one line saying why)."""
