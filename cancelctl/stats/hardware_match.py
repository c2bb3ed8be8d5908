"""Did the arms of one comparison group run on the same hardware? The kernels a run's numbers come from
differ between GPU types (A100 40 GB beside 80 GB, H100 beside H200: common on mixed partitions) and
between CPU kernel levels (AVX2 / AVX512 / AMX change float summation order): the same lab seeds
collapsed on one machine and not on another. Checked like compute (`compute_match`):
a violation the report refuses unless forced."""

from __future__ import annotations

import pandas as pd

from cancelctl.stats.compute_match import ComputeViolation

# collect's runs frame (tracking.tags.HARDWARE_COLUMNS; the statistics import nothing that does I/O)
GPU_COLUMN, CPU_KERNELS_COLUMN = "hardware_gpu", "hardware_cpu_kernels"


def compared_hardware(runs: pd.DataFrame) -> pd.Series:
    """Per run: its GPUs where it had any, else its CPU kernels; NA where the run recorded neither
    (runs from before hardware was recorded, or from another tool)."""
    gpu = _column(runs, GPU_COLUMN)
    cpu = _column(runs, CPU_KERNELS_COLUMN)
    return gpu.where(gpu != "", cpu).replace("", pd.NA)


def check_hardware_matched(runs: pd.DataFrame) -> list[ComputeViolation]:
    """A violation per comparison group whose runs ran on more than one kind of hardware (runs that
    recorded none are not judged). GPU runs are compared on their GPUs (name and memory), CPU runs on
    torch's kernel level and the instruction-set flags that change kernels."""
    kinds = compared_hardware(runs)
    frame = pd.DataFrame({"group": runs["group"].to_numpy(), "arm": runs["arm"].to_numpy(), "hardware": kinds.to_numpy()})
    violations = []
    for group, part in frame.dropna(subset=["hardware"]).groupby("group", sort=True):
        if part["arm"].nunique() >= 2 and part["hardware"].nunique() > 1:
            values = {str(arm): " | ".join(sorted(p["hardware"].unique())) for arm, p in part.groupby("arm", sort=True)}
            violations.append(ComputeViolation(str(group), "hardware", values, "differs across runs"))
    return violations


def hardware_note(runs: pd.DataFrame) -> str | None:
    """One line saying what the runs ran on ("ran on: AVX512 avx2 avx512f (all 6 runs)"), or None if
    no run recorded it."""
    kinds = compared_hardware(runs).dropna()
    if kinds.empty:
        return None
    counts = kinds.value_counts()
    if len(counts) == 1:
        return f"ran on: {counts.index[0]} (all {int(counts.iloc[0])} runs with a record)"
    return "ran on: " + "; ".join(f"{kind} ({int(n)} run{'s' if n > 1 else ''})" for kind, n in counts.items())


def _column(runs: pd.DataFrame, name: str) -> pd.Series:
    if name not in runs.columns:
        return pd.Series([""] * len(runs), index=runs.index, dtype=object)
    return runs[name].astype(object).where(runs[name].notna(), "").astype(str)
