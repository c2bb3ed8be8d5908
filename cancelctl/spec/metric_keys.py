"""Metric keys that more than one wing names (the table of keys is docs/metrics.md): the spec's
defaults (claims, monitor rules), the report and the CLI's options read them here."""

from __future__ import annotations

from typing import Literal

# the compute axes runs are matched, plotted and judged on: generated tokens, optimizer updates,
# wall-clock hours (`report --compute`, a claim's `metric.compute`)
ComputeAxis = Literal["tokens", "updates", "hours"]

# training reward, the curve of Prediction 1/2 and Compute@Reward [D eq. 19–21, Table 2]
REWARD_KEY = "critic/score/mean"
