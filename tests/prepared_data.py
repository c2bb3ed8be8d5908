"""Stand-ins for what `cancelctl data prepare NAME` writes, for tests that may not download: one row
per split, in verl's schema and at prepare's paths, carrying the dataset's own data_source (so the
data checks and reward dispatch see what they would see on a user's machine)."""

from __future__ import annotations

from pathlib import Path

from cancelctl.data.inventory import DEFAULT_OUT_DIR, entry
from cancelctl.data.parquet_files import write_rows_atomic
from cancelctl.data.verl_rows import MATH_INSTRUCTION, verl_row


def write_stand_ins(names: list[str], root: Path, out_dir: Path | str = DEFAULT_OUT_DIR) -> list[Path]:
    written = []
    for name in names:
        found = entry(name)
        for split, path in found.files(Path(root) / out_dir).items():
            question = f"What is 1 + 1? ({name}, {split})"
            row = verl_row(
                data_source=found.data_source,
                messages=[{"role": "user", "content": f"{question} {MATH_INSTRUCTION}"}],
                ability="math",
                ground_truth="2",
                split=split,
                index=0,
                source_id="0",
                question=question,
                entry="{}",
            )
            path.parent.mkdir(parents=True, exist_ok=True)
            write_rows_atomic([row], path)
            written.append(path)
    return written
