"""The verl backend's planning hook: runs whose data files verl could not read are refused before
submission (`launch_refusals`, `VerlBackend.launch_refusals`, which launch asks before submitting). Every loss and
batching strategy runs on verl; the combinations that cannot work are refused at render."""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from cancelctl.spec.run import RunSpec


def launch_refusals(run: RunSpec) -> list[str]:
    from cancelctl.backends.verl.data_files import data_problems

    # a missing or unreadable data file fails verl only once the job holds its GPUs
    return [f"{field}: {problem}" for field, problem in data_problems(run)]
