"""The verl backend's planning hook: runs it cannot launch yet, or whose data files verl could not
read, are refused before submission (`launch_refusals`, found and called by `cancelctl.launch.preflight`)."""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from cancelctl.spec.run import RunSpec


def launch_refusals(run: RunSpec) -> list[str]:
    from cancelctl.backends.verl.data_files import data_problems
    from cancelctl.backends.verl.render import unsupported_on_verl

    # a missing or unreadable data file fails verl only once the job holds its GPUs
    return [*unsupported_on_verl(run), *(f"{field}: {problem}" for field, problem in data_problems(run))]
