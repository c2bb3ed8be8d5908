"""Numbers as people read them in the terminal, Markdown and HTML (CSV/JSON keep the raw numbers),
and the report's summary lines shared by those three renderers."""

from __future__ import annotations

import numpy as np

from cancelctl.report.prepared import NOT_MATCHED, Report
from cancelctl.stats.frames import COMPUTE_KEYS, COMPUTE_LABELS

# under every table that shows a mean [95% CI] over seeds (`intervals.student_t_ci`)
CI_NOTE = "95% CI: Student's t over seeds, mean ± t(0.975, n−1)·sd/√n"
# under every table of scores known to lie in [0, 1] (`intervals.unit_interval_ci`)
UNIT_CI_NOTE = (
    "95% CI of a score in [0, 1]: Wilson's score interval with the seeds' spread, the μ with "
    "(mean − μ)² ≤ t(0.975, n−1)²·sd²/(n·mean(1 − mean))·μ(1 − μ); ≈ Student's t away from 0 and 1, never outside [0, 1]"
)


def fmt_number(value: float | None, digits: int = 4) -> str:
    """Compact, unit-free: 0.8253, 12.3k, 1.25M; missing as an em dash."""
    if value is None or not np.isfinite(value):
        return "—"
    magnitude = abs(value)
    for threshold, scale, suffix in ((1e9, 1e9, "G"), (1e6, 1e6, "M"), (1e4, 1e3, "k")):
        if magnitude >= threshold:
            return f"{value / scale:.3g}{suffix}"
    return f"{value:.{digits}g}"


def fmt_interval(mean: float, lo: float, hi: float, n: int) -> str:
    """'0.663 [0.653, 0.672]'; one seed has no interval (t with 0 degrees of freedom): '0.0625 [n/a: 1 seed]'."""
    if n == 1:
        return f"{fmt_number(mean, 3)} [n/a: 1 seed]"
    return f"{fmt_number(mean, 3)} [{fmt_number(lo, 3)}, {fmt_number(hi, 3)}]"


def fmt_p(p: float, n_paired: int) -> str:
    if n_paired == 0:
        return "no shared seeds"
    if not np.isfinite(p):
        return f"n/a ({n_paired} shared seed{'s' if n_paired != 1 else ''})"
    return "<0.001" if p < 0.001 else f"{p:.3f}"


def fmt_delta(delta: float) -> str:
    return "—" if not np.isfinite(delta) else ("+" if delta >= 0 else "") + fmt_number(delta)


def fmt_ratio(ratio: float) -> str:
    return f"{ratio:.2f}×"


def header_lines(report: Report) -> list[str]:
    """What the report compares and how (baseline, reward key, compute axis, κ, matched or not)."""
    status = "yes"
    if not report.compute_matched:
        status = f"**{NOT_MATCHED}** ({len(report.violations)} violation(s), reported anyway)"
    return [
        f"baseline: {report.baseline}",
        f"training reward: {report.metric}; "
        f"compute axis: {COMPUTE_LABELS[report.compute]} ({COMPUTE_KEYS[report.compute]})",
        report.kappa_note,
        f"compute-matched: {status}",
        *report.notes,
    ]
