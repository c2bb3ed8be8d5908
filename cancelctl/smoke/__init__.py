"""`cancelctl smoke`: every distinct verl configuration of a sweep runs two real training steps, a
checkpoint and a resume on CPU, on a tiny model of its own family and the first rows of its own data —
the errors a GPU queue would show after hours, in minutes (runner.py says how)."""

from cancelctl.smoke.runner import FAILED, OK, REFUSED, SmokeResult, SmokeRow, run_smoke

__all__ = ["FAILED", "OK", "REFUSED", "SmokeResult", "SmokeRow", "run_smoke"]
