"""guard.results: one result of the results contract (record.Result, built once by
result.result_dict), and its checks (each gate records its value, bound, status and one line
saying why). Results files are read by guard.core.results_file and keyed by
guard.core.result_key, below this layer, because tracking reads and keys them too."""
