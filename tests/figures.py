"""Figures a test measured (seconds, counts, allocations): printed, and appended to the file
$CANCELCTL_TEST_FIGURES names where it is set — pytest-xdist shows no output of a passing test, and CI
prints that file at its end, so each run's figures are in its log."""

from __future__ import annotations

import os

FIGURES_ENV = "CANCELCTL_TEST_FIGURES"


def record_figure(text: str) -> None:
    print(f"\n{text}")
    path = os.environ.get(FIGURES_ENV)
    if path:
        with open(path, "a", encoding="utf-8") as handle:  # one short append per figure: workers do not interleave
            handle.write(text.replace("\n", " ") + "\n")
