"""Old import path of `cancelctl.report.sweep_report` (`cancelctl report` as one library call),
kept so `from cancelctl.reporting import report_sweep` (cli.py, tests/test_launch.py) still works.
New code imports `cancelctl.report`."""

from cancelctl.report.sweep_report import report_sweep

__all__ = ["report_sweep"]
