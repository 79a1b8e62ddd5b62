"""The bundled compiler's tuning cache: task keys, the cache file, the dispatch context
the emitters consult, and the tuner behind ``guard tune`` (guard/compiler/tuning/tune.py)."""
