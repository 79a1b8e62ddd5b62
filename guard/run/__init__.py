"""guard.run: a run. suite -> cases -> rounds -> result -> delivery.

- runner: run_suite, what ``guard run`` calls
- case: bind a model entry, build and load it, run it, judge it
- build: the artefact build and its content-addressed cache
- deliver: reports on disk, then tracking, then the console
- shard, merge: one slice of a suite, and joining the slices
- document: the results document as run and merge write it (TypedDicts)
"""
