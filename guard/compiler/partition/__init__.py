"""guard.compiler.partition: which backend runs which nodes. Support predicates and delegate
profiles (support), the assignment and its costs (assign), the report's JSON
(report_json), and the frozen compile-time plan (plan)."""
