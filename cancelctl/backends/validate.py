"""`cancelctl validate`: every layer a spec must pass before anything is submitted.

1. YAML + pydantic schema (file:line:col, field path), 2. sweep expansion and the compute-matched
check, 3. for verl runs, composing each unique override set against verl's installed Hydra config
(offline), 4. their data files: what verl reads in every row, and the prompts verl keeps under
`data.max_prompt_length` with the model's tokenizer and chat template (`verl.prompt_lengths`), 5. each
verl configuration's per-GPU memory against `cluster.gpu_memory_gb`, from the model's config.json
(`verl.memory_check`). Layer 3 is reported as skipped when verl is not installed (CI installs it); the
prompt count when the tokenizer is not on this machine; layer 4 with --skip-data; layer 5 when the
config.json is not on this machine. A SLURM run's time limit that may not hold start-up, one step and
one checkpoint is warned about with layer 2 (`jobs.time_limit`, from the backends' estimates), and so is
an arm running one of verl's built-in losses in a way that differs from the paper its name cites
(`verl.builtin_losses`).

It sits with the backends because layers 3 to 5 are a backend's own checks (`Backend.validate_files`,
verl's in `verl.validation`; the lab has none): layers 1 and 2 are the spec wing's
(`cancelctl.spec.expand`), which never imports a backend.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from cancelctl.backends.protocol import FileResult, ValidateOptions
from cancelctl.backends.registry import get_backend
from cancelctl.errors import SpecError
from cancelctl.spec.claims import claims_rule_warnings, rules_off_by_arm
from cancelctl.spec.expand import load_sweep


@dataclass
class ValidationReport:
    files: list[FileResult]
    backend_status: str = ""  # layer 3's (e.g. verl composed, skipped, or not installed)
    data_status: str = ""  # why the prompts' lengths were not measured, said once ('' when they were)
    memory_status: str = ""  # why GPU memory was not estimated, said once ('' when it was)

    @property
    def ok(self) -> bool:
        return all(f.ok for f in self.files)


def validate_files(paths: list[Path], *, allow_unmatched: bool = False, compose_verl: bool = True,
                   check_data: bool = True, check_memory: bool = True, model: str | None = None,
                   progress: Callable[[str], None] | None = None) -> ValidationReport:
    """Validate each file; `progress(message)` hears each step (composing verl configs takes seconds).
    Layers 3 to 5 are each backend's own (`Backend.validate_files`), with `ValidateOptions`:
    `compose_verl` (off: `--skip-verl`), `check_data` (the runs' data files are read, and their
    prompts measured with the model's tokenizer; `model` stands in for the specs' model.path, as
    `smoke --model` does), `check_memory` (each configuration's per-GPU memory against the GPU)."""
    results: list[FileResult] = []
    by_backend: dict[str, dict[Path, list]] = {}  # backend -> file -> its runs on that backend
    sweeps = {}
    for i, path in enumerate(paths, 1):
        if progress is not None:
            progress(f"checking {path} ({i}/{len(paths)})")
        try:
            sweep = load_sweep(path, allow_unmatched=allow_unmatched)
        except SpecError as exc:
            results.append(FileResult(path, False, title=exc.title, lines=exc.render(limit=10**6).splitlines()))
            continue
        sweeps[path] = sweep
        runs_of: dict[str, list] = {}
        for run in sweep.runs:
            runs_of.setdefault(run.spec.backend, []).append(run)
        note = f", NOT compute-matched: {len(sweep.warnings)} warnings" if sweep.warnings else ""
        off = rules_off_by_arm((run.arm, run.spec.monitor) for run in sweep.runs)
        note += "".join(f"; warning: {w}" for w in claims_rule_warnings(sweep.spec.claims, off))
        note += "".join(f"; warning: {w}" for w in time_limit_warnings(sweep.runs))
        for name, runs in runs_of.items():
            note += "".join(f"; warning: {w}" for w in get_backend(name).validate_warnings(runs))
            by_backend.setdefault(name, {})[path] = runs
        results.append(FileResult(path, True, n_runs=len(sweep.runs), note=note))
    options = ValidateOptions(compose=compose_verl, check_data=check_data, check_memory=check_memory, model=model)
    statuses = [get_backend(name).validate_files(results, sweeps, runs, options, progress)
                for name, runs in by_backend.items()]
    return ValidationReport(results, *("; ".join(filter(None, parts)) for parts in zip(*statuses or [("", "", "")])))


def time_limit_warnings(runs) -> list[str]:
    """A SLURM time limit that may not hold start-up, one step and one checkpoint (`jobs.time_limit`):
    a warning, not a refusal (the estimates err slow), once per message with the arms it covers."""
    from cancelctl.executors.registry import get_executor
    from cancelctl.jobs.time_limit import time_limit_plan

    arms: dict[str, list[str]] = {}
    for run in runs:
        if get_executor(run.spec.executor).has_time_limit and (warning := time_limit_plan(run).warning()) is not None:
            of = arms.setdefault(warning, [])
            if run.arm not in of:
                of.append(run.arm)
    return [f"{warning} [arm {', '.join(of)}]" for warning, of in arms.items()]
