"""guard.prepare: what a suite's runs read, made before them.

- init: ``guard init``: a suite entry from a model file, its golden, the backends that build it
- tune: ``guard tune``: the bundled backend's tuning cache
- calibrate: ``guard calibrate``: the noise file, every case's noise and run noise
"""
