"""guard.results: the typed results tree, at the bottom of guard so that every reader
(track, stats, measure, golden, compare, report, doctor, reduce, run) can use it.

guard.results.result.Result and its parts, the manifest (guard.results.manifest), the
counted block (guard.results.counted), the results and comparison documents
(guard.results.documents), the one key results are paired by (Result.key) and the
one loader (guard.results.load). Records read leniently and write back the JSON they
were read from, byte for byte (guard.results.record says how, and how to add a field).
Readers outside this package read attributes, never a result's string keys
(tests/results/test_no_string_keys.py). Check evaluation is guard.checks, above measure
and stats, whose figures it judges.
"""
