"""The golden report cases: fixed synthetic frames and options, and the files compared byte for byte.

`python tests/report/golden_cases.py` rewrites tests/report/golden/ from the current code; do that
only for an intended change of the report's numbers or wording, and say so in the commit.
"""

from __future__ import annotations

import sys
from pathlib import Path

from report_frames import build, synthetic_sweep

GOLDEN_DIR = Path(__file__).parent / "golden"


def case_options() -> dict[str, tuple]:
    """case name -> (runs, metrics, build_report options): the default report and a stress case
    (unmatched arms reported anyway, κ given and never reached by one arm, smoothing, updates axis,
    an unfinished run)."""
    runs, metrics = synthetic_sweep(steps=40)
    skewed_runs, skewed_metrics = synthetic_sweep(token_scale={("grpo", 8): 1.5}, steps=40)
    skewed_runs.loc[skewed_runs["run_id"] == "dfpo-G4-s2", "state"] = "FAILED"
    return {
        "default": (runs, metrics, dict(baseline="gspo")),
        "unmatched": (
            skewed_runs,
            skewed_metrics,
            dict(baseline="dfpo", allow_unmatched=True, threshold=0.55, compute="updates", smooth_window=3),
        ),
    }


def golden_files(out_dir: Path) -> list[Path]:
    """Every text file the report writes (plots are PNGs: left out, drawn with plots=False)."""
    return sorted(p for p in out_dir.rglob("*") if p.is_file())


def build_case(name: str, out_dir: Path):
    runs, metrics, options = case_options()[name]
    return build(runs, metrics, sweep=f"golden-{name}", out_dir=out_dir, plots=False, **options)


def regenerate() -> None:
    for name in case_options():
        target = GOLDEN_DIR / name
        for old in golden_files(target) if target.exists() else []:
            old.unlink()
        build_case(name, target)
        print(f"wrote {target}")


if __name__ == "__main__":
    sys.path.insert(0, str(Path(__file__).parent))
    regenerate()
