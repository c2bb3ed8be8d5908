"""Stand-ins for what `cancelctl data prepare NAME` writes, for tests that may not download: one row
per split, in verl's schema and at prepare's paths, carrying the dataset's own data_source (so the
data checks and reward dispatch see what they would see on a user's machine)."""

from __future__ import annotations

from pathlib import Path

from cancelctl.data.inventory import DEFAULT_OUT_DIR, entry
from cancelctl.data.parquet_files import write_rows_atomic
from cancelctl.data.verl_rows import MATH_INSTRUCTION, verl_row


def write_verl_file(path: Path, data_source: str, split: str = "train") -> Path:
    """One verl-shaped row ('What is 1 + 1?', ground truth '2') at `path`."""
    question = f"What is 1 + 1? ({data_source}, {split})"
    row = verl_row(
        data_source=data_source,
        messages=[{"role": "user", "content": f"{question} {MATH_INSTRUCTION}"}],
        ability="math",
        ground_truth="2",
        split=split,
        index=0,
        source_id="0",
        question=question,
        entry="{}",
    )
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    write_rows_atomic([row], path)
    return path


def write_stand_ins(names: list[str], root: Path, out_dir: Path | str = DEFAULT_OUT_DIR) -> list[Path]:
    """Dataset `name`'s files under `root/out_dir`, as `cancelctl data prepare` lays them out."""
    return [
        write_verl_file(path, entry(name).data_source, split)
        for name in names
        for split, path in entry(name).files(Path(root) / out_dir).items()
    ]


def experiment_datasets() -> list[str]:
    """Every dataset the shipped verl experiments name (by the paths `data prepare` writes)."""
    from project_paths import EXPERIMENTS

    from cancelctl.backends.verl.data_files import data_files
    from cancelctl.data.layout import dataset_for_path
    from cancelctl.spec.expand import load_sweep

    names = {}
    for path in sorted(EXPERIMENTS.glob("*.yaml")):
        for run in load_sweep(path, allow_unmatched=True).runs:
            if run.spec.backend == "verl":
                names.update(dict.fromkeys(found[0] for f in data_files(run.spec) if (found := dataset_for_path(f))))
    return list(names)
