"""What a backend is: the one class the rest of cancelctl asks about a run's training (docs/extending.md).

The spec asks it for its defaults and checks while a file validates; `validate` for its own layers
(config, data, memory); `plan` for its extra columns; launch for its refusals; the time-limit plan
for its step cost; `render` for what its job runs; the job for `train`, which logs through a
`MetricLogger`. Nothing outside `cancelctl/backends/` branches
on a backend's name: it asks the backend registered under that name (`cancelctl.backends.registry`).

A class module is imported when a spec names its backend, so it imports nothing heavy at module
level: torch, verl and the like go inside the methods that need them. `BaseBackend` gives every
optional part a neutral answer; a new backend sets `name` and `default_lr` and writes `train`.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol, runtime_checkable

if TYPE_CHECKING:
    from collections.abc import Callable

    from cancelctl.jobs.time_limit import StepCost
    from cancelctl.spec.expand import Sweep
    from cancelctl.spec.experiment import ExperimentSpec
    from cancelctl.spec.run import RunSpec
    from cancelctl.tracking.logger import MetricLogger


@dataclass
class PlanColumns:
    """What a backend adds to `plan`'s rows, by run id, and why a column was not measured ('' when it was)."""

    gpu_memory: dict[str, Any] = field(default_factory=dict)  # run id -> its memory check (note(), problem, to_json())
    gpu_memory_skipped: str = ""
    prompt_lengths: dict[str, list[dict]] = field(default_factory=dict)  # run id -> [{label, kept, prompts, ...}]
    prompt_lengths_skipped: str = ""


@dataclass
class FileResult:
    """One sweep file's validation (`cancelctl validate`): a backend's layers mark it failed with lines."""

    path: Path
    ok: bool
    n_runs: int = 0
    title: str = ""
    lines: list[str] = field(default_factory=list)
    note: str = ""


@dataclass(frozen=True)
class ValidateOptions:
    """The checks a backend's layers make (the CLI's --skip-verl and --skip-data turn two off)."""

    compose: bool = True  # layer 3: the backend's own config, composed offline
    check_data: bool = True  # layer 4: the data files, and the prompts kept under the length cap
    check_memory: bool = True  # layer 5: per-GPU memory
    model: str | None = None  # stands in for the specs' model.path (its tokenizer and config.json)


# (layer 3's status, why the prompts were not measured, why GPU memory was not estimated): '' each when
# there is nothing to say; a backend's layers return one, said once under the files' lines
ValidationStatus = tuple[str, str, str]


@runtime_checkable
class Backend(Protocol):
    name: str
    default_lr: float  # the optimizer's learning rate where the spec sets none
    # its runs fork from the local executor's preloaded worker (`cancelctl.jobs.zygote`, whose list of
    # imports is this backend's); False: each starts in a fresh interpreter
    preloaded: bool

    def max_new_tokens(self, spec: ExperimentSpec, cap: int) -> int:
        """The response cap this backend generates to, given the spec's own (`cap`)."""
        ...

    def check_spec(self, spec: ExperimentSpec) -> None:
        """ValueError naming the field, for a spec this backend cannot run (reported at its file:line)."""
        ...

    def validate_warnings(self, runs: list[RunSpec]) -> list[str]:
        """`validate`'s warnings on one file's runs of this backend (not refusals)."""
        ...

    def validate_files(self, results: list[FileResult], sweeps: dict[Path, Sweep], runs: dict[Path, list[RunSpec]],
                       options: ValidateOptions, progress: Callable[[str], None] | None) -> ValidationStatus:
        """`validate`'s layers 3 to 5 (the backend's config, data, memory) on each file's runs of this
        backend, marking `results`; what to say once under them."""
        ...

    def launch_refusals(self, run: RunSpec) -> list[str]:
        """Why this run cannot be launched yet (empty: it can), checked before anything is submitted."""
        ...

    def plan_columns(self, runs: list[RunSpec]) -> PlanColumns:
        """This backend's extra plan columns for its runs (all of `runs` name this backend)."""
        ...

    def step_cost(self, run: RunSpec) -> StepCost | None:
        """One step, one checkpoint and start-up, for the time limit's plan (`cancelctl.jobs.time_limit`)."""
        ...

    def workload_lines(self, run: RunSpec, run_dir: Path) -> list[str]:
        """What rank 0 runs once the job's nodes are up, as `render` shows it inside the job script."""
        ...

    def rendered_run(self, run: RunSpec) -> str:
        """What `render` prints where the executor has no job script."""
        ...

    def render_notes(self, run: RunSpec) -> list[str]:
        """What the rendered command does not say."""
        ...

    def smoke_checked(self, run: RunSpec) -> bool:
        """Whether `cancelctl smoke` runs this run's configuration (a short real run before a sweep)."""
        ...

    def train(self, run: RunSpec, run_dir: Path, logger: MetricLogger, cache_dir: Path) -> dict[str, float]:
        """Train `run` in this process, logging each step through `logger`; the final metrics."""
        ...


class BaseBackend:
    """Neutral answers for the optional parts of `Backend`: no checks, no refusals, no extra columns,
    no step-cost estimate (the job gets submitit's lead), the run trained in-process."""

    name: str
    default_lr: float
    preloaded = False

    def max_new_tokens(self, spec: ExperimentSpec, cap: int) -> int:
        return cap

    def check_spec(self, spec: ExperimentSpec) -> None:
        return None

    def validate_warnings(self, runs: list[RunSpec]) -> list[str]:
        return []

    def validate_files(self, results: list[FileResult], sweeps: dict[Path, Sweep], runs: dict[Path, list[RunSpec]],
                       options: ValidateOptions, progress: Callable[[str], None] | None) -> ValidationStatus:
        return "", "", ""

    def launch_refusals(self, run: RunSpec) -> list[str]:
        return []

    def plan_columns(self, runs: list[RunSpec]) -> PlanColumns:
        return PlanColumns()

    def step_cost(self, run: RunSpec) -> StepCost | None:
        return None

    def workload_lines(self, run: RunSpec, run_dir: Path) -> list[str]:
        return [f"# the {self.name} backend trains in the rank-0 process itself ({type(self).__module__})"]

    def rendered_run(self, run: RunSpec) -> str:
        return json.dumps(run.to_json(), indent=2)

    def render_notes(self, run: RunSpec) -> list[str]:
        return []

    def smoke_checked(self, run: RunSpec) -> bool:
        return False

    def train(self, run: RunSpec, run_dir: Path, logger: MetricLogger, cache_dir: Path) -> dict[str, float]:
        raise NotImplementedError(f"backend {self.name!r} has no train")
