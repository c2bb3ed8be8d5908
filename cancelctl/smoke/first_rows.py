"""The smoke's data: the first rows of each of the sweep's own data files, columns and all.

A copy keeps the file's last two path parts (`<dataset>/<split>.parquet`), so a dataset that
`cancelctl data prepare` made is still recognised by its path and scored by cancelctl's rewards
(backends.verl.data_files.scored_by_cancelctl), exactly as the real run will be.
"""

from __future__ import annotations

import itertools
from pathlib import Path

# Enough training prompts for two steps of any smoke size, and for reward_balanced's extra rounds.
TRAIN_ROWS = 64
VAL_ROWS = 4


def first_rows(source: str | Path, out_dir: Path, index: int, rows: int) -> str:
    """Write the first `rows` rows of parquet file `source` under `out_dir/<index>/`; the copy's path."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    source = Path(source)
    target = Path(out_dir) / str(index) / source.parent.name / source.name
    target.parent.mkdir(parents=True, exist_ok=True)
    file = pq.ParquetFile(source)
    first = list(itertools.islice(file.iter_batches(batch_size=rows), 1))
    pq.write_table(pa.Table.from_batches(first, schema=file.schema_arrow), target)
    return str(target)
