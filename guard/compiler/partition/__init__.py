"""guard.compiler.partition: which backend runs which nodes. Support predicates and delegate
profiles (support), the assignment and its costs (assign), and the frozen compile-time
plan (plan)."""
