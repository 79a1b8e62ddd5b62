"""Fitting a memory budget: the escape ladder (ladder), its reports (describe) and the
latency each rung costs against the unconstrained build (measure)."""
