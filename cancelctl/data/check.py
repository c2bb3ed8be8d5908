"""Checks `validate` runs on a spec's local data files before any job is queued: a file verl would
fail on after hours in the queue is reported now, and a missing one names the command that makes it.
"""

from __future__ import annotations

from collections import Counter
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq

from cancelctl.data.extras import MissingExtra
from cancelctl.data.inventory import GYM_DATA_SOURCE_PREFIX, catalog
from cancelctl.data.layout import dataset_for_path, prepare_command
from cancelctl.data.rewards import UnknownDataSource, reward_for

# What verl 0.9.1 reads from a row: the chat prompt (RLHFDataset), the data_source and
# reward_model.ground_truth (its reward manager indexes both). ability and extra_info are optional to it.
REQUIRED_COLUMNS = ("prompt", "data_source", "reward_model")


def _missing(path: Path) -> str:
    made_by = dataset_for_path(path)
    if made_by is None:
        return f"{path}: no such file"
    name, out_dir = made_by
    return f"{path}: no such file; make it with: {prepare_command(name, out_dir=out_dir)}"


def _prompt_problem(field_type: pa.DataType) -> str | None:
    if not (pa.types.is_list(field_type) or pa.types.is_large_list(field_type)):
        return f"is {field_type}, verl needs a chat list of {{role, content}} messages"
    item = field_type.value_type
    names = {item.field(i).name for i in range(item.num_fields)} if pa.types.is_struct(item) else set()
    if not {"role", "content"} <= names:
        return f"messages are {item}, verl needs {{role, content}}"
    return None


def _rows_without_ground_truth(path: Path, *, require_ground_truth: bool) -> list[str]:
    """Every row, not only the first: verl's reward manager reads `reward_model["ground_truth"]` of each
    row it scores, so a row without reward_model fails the run when it is drawn, hours in; cancelctl's
    rewards also need the ground truth itself (a custom reward may not)."""
    import pyarrow.compute as pc

    column = pq.read_table(path, columns=["reward_model"]).column("reward_model")
    missing = column.is_null()
    what = "reward_model"
    if require_ground_truth:
        truth = pc.struct_field(column, "ground_truth")
        empty = truth.is_null()
        if pa.types.is_string(truth.type) or pa.types.is_large_string(truth.type):
            empty = pc.or_(empty, pc.equal(pc.utf8_trim_whitespace(truth), ""))
        missing, what = pc.or_(missing, pc.fill_null(empty, True)), "reward_model.ground_truth"
    count = pc.sum(missing).as_py() or 0
    if not count:
        return []
    first = pc.index(missing, True).as_py()
    return [f"{path}: {count:,} of {len(column):,} rows have no {what} (the first: row {first}); the reward "
            f"has nothing to score them against (verl fails when it draws one)"]


def check_parquet(path: Path | str, *, require_known_reward: bool = True) -> list[str]:
    """Problems with one data file, one line each (empty: verl can train on it with these rewards).

    require_known_reward=False when the spec names its own reward function: then any data_source may
    be fine, and only the columns are checked.
    """
    path = Path(path)
    if not path.is_file():
        return [_missing(path)]
    try:
        schema = pq.read_schema(path)
    except (OSError, pa.ArrowException) as exc:
        return [f"{path}: not a readable parquet file ({exc})"]

    problems: list[str] = []
    missing = [column for column in REQUIRED_COLUMNS if column not in schema.names]
    if missing:
        problems.append(f"{path}: missing column(s) verl needs: {', '.join(missing)}")
    if "prompt" in schema.names and (why := _prompt_problem(schema.field("prompt").type)):
        problems.append(f"{path}: column prompt {why}")
    if "reward_model" in schema.names:
        reward_type = schema.field("reward_model").type
        if not pa.types.is_struct(reward_type) or reward_type.get_field_index("ground_truth") < 0:
            problems.append(f"{path}: column reward_model has no ground_truth field (is {reward_type})")
        else:
            problems += _rows_without_ground_truth(path, require_ground_truth=require_known_reward)

    if pq.ParquetFile(path).metadata.num_rows == 0:
        problems.append(f"{path}: no rows")
    elif require_known_reward and "data_source" in schema.names:
        counts = Counter(pq.read_table(path, columns=["data_source"]).column("data_source").to_pylist())
        for data_source, rows in sorted(counts.items(), key=lambda kv: str(kv[0])):
            try:
                reward_for(str(data_source))
            except UnknownDataSource:
                problems.append(
                    f"{path}: data_source {data_source!r} ({rows} rows) has no reward in cancelctl.data "
                    f"(known: {', '.join(e.data_source for e in catalog())}, {GYM_DATA_SOURCE_PREFIX}<task>)"
                )
            except MissingExtra as exc:
                problems.append(f"{path}: data_source {data_source!r} cannot be checked: {exc}")
    return problems
