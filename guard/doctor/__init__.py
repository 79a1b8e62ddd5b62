"""guard doctor: the slow-compiler checklist, automated (see guard.doctor.doctor)."""

from guard.doctor.doctor import SCHEMA_VERSION, diagnose, exit_code

__all__ = ["SCHEMA_VERSION", "diagnose", "exit_code"]
