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

It sits with the backends because layer 3 is a backend's own check: layers 1 and 2 are the spec
wing's (`cancelctl.spec.expand`), which never imports a backend.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from cancelctl.errors import SpecError
from cancelctl.spec.claims import claims_rule_warnings, rules_off_by_arm
from cancelctl.spec.expand import load_sweep


@dataclass
class FileResult:
    path: Path
    ok: bool
    n_runs: int = 0
    title: str = ""
    lines: list[str] = field(default_factory=list)
    note: str = ""


@dataclass
class ValidationReport:
    files: list[FileResult]
    verl_status: str = ""
    data_status: str = ""  # why the prompts' lengths were not measured, said once ('' when they were)
    memory_status: str = ""  # why GPU memory was not estimated, said once ('' when it was)

    @property
    def ok(self) -> bool:
        return all(f.ok for f in self.files)


def validate_files(paths: list[Path], *, allow_unmatched: bool = False, compose_verl: bool = True,
                   check_data: bool = True, check_memory: bool = True, model: str | None = None,
                   progress: Callable[[str], None] | None = None) -> ValidationReport:
    """Validate each file; `progress(message)` hears each step (composing verl configs takes seconds).
    `check_data`: the verl runs' data files are read here (see `backends.verl.data_files`), and their
    prompts measured with the model's tokenizer (`backends.verl.prompt_lengths`; `model` stands in for
    the specs' model.path, as `smoke --model` does). `check_memory`: each configuration's per-GPU
    memory estimate against the GPU (`backends.verl.memory_check`)."""
    results: list[FileResult] = []
    verl_runs: dict[Path, list] = {}
    sweeps = {}
    for i, path in enumerate(paths, 1):
        if progress is not None:
            progress(f"checking {path} ({i}/{len(paths)})")
        try:
            sweep = load_sweep(path, allow_unmatched=allow_unmatched)
        except SpecError as exc:
            results.append(FileResult(path, False, title=exc.title, lines=exc.render(limit=10**6).splitlines()))
            continue
        note = f", NOT compute-matched: {len(sweep.warnings)} warnings" if sweep.warnings else ""
        off = rules_off_by_arm((run.arm, run.spec.monitor) for run in sweep.runs)
        note += "".join(f"; warning: {w}" for w in claims_rule_warnings(sweep.spec.claims, off))
        note += "".join(f"; warning: {w}" for w in time_limit_warnings(sweep.runs))
        note += "".join(f"; warning: {w}" for w in verl_builtin_loss_warnings(sweep.runs))
        results.append(FileResult(path, True, n_runs=len(sweep.runs), note=note))
        runs = [r for r in sweep.runs if r.spec.backend == "verl"]
        if runs:
            verl_runs[path] = runs
            sweeps[path] = sweep
    status = data_status = memory_status = ""
    if verl_runs:
        status = _compose_verl(results, verl_runs, progress) if compose_verl else "verl layer skipped (--skip-verl)"
        if check_data:
            _check_data(results, sweeps, verl_runs)
            if progress is not None:
                progress("measuring the prompts under the model's chat template")
            data_status = _check_prompt_lengths(results, sweeps, verl_runs, model)
        else:
            status = "; ".join(filter(None, [status, "data files not read (--skip-data)"]))
        if check_memory:
            memory_status = _check_memory(results, sweeps, verl_runs)
    return ValidationReport(results, status, data_status, memory_status)


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


def verl_builtin_loss_warnings(runs) -> list[str]:
    """An arm running one of verl's built-in losses where verl's defaults or its settings make it another
    objective than the paper its name cites (`backends.verl.builtin_losses`): a warning with the setting
    to write, not a refusal (it may be the comparison the sweep is for)."""
    if not any(run.spec.backend == "verl" and run.spec.algorithm.verl_loss_mode for run in runs):
        return []
    from cancelctl.backends.verl.builtin_losses import builtin_loss_warnings

    return builtin_loss_warnings(runs)


def _check_data(results: list[FileResult], sweeps: dict, verl_runs: dict[Path, list]) -> None:
    """Each verl run's data files exist and hold what verl reads: one line per problem, at the line
    of the field that names the file; a missing file names the `cancelctl data prepare` that makes it."""
    from cancelctl.backends.verl.data_files import data_problems

    for item in results:
        runs, sweep = verl_runs.get(item.path, []), sweeps.get(item.path)
        lines = list(dict.fromkeys(
            f"{sweep.location_of(run.arm, field)}: {field}: {problem}" for run in runs for field, problem in data_problems(run)
        ))
        if lines:
            item.title = "data files verl could not read" if item.ok else f"{item.title}; data files verl could not read"
            item.ok = False
            item.lines += lines


def _check_prompt_lengths(results: list[FileResult], sweeps: dict, verl_runs: dict[Path, list], model: str | None) -> str:
    """verl keeps enough prompts under max_prompt_length: a refusal at the field's line when a step's
    worth would not survive, a warning with the share dropped otherwise; why the prompts were not
    measured (said once), or ''."""
    from cancelctl.backends.verl.prompt_lengths import measure_runs

    skipped = ""
    for item in results:
        runs, sweep = verl_runs.get(item.path, []), sweeps.get(item.path)
        if not runs:
            continue
        checks, why = measure_runs(runs, model=model)
        skipped = skipped or why
        refusals, warnings = {}, {}
        for run in runs:
            for check in checks.get(run.run_id, []):
                if check.refused:
                    refusals[f"{sweep.location_of(run.arm, 'data.max_prompt_length')}: {check.refusal()}"] = None
                elif (warning := check.warning()) is not None:
                    warnings[warning] = None
        if refusals:
            title = "prompts verl would drop under max_prompt_length"
            item.title = title if item.ok else f"{item.title}; {title}"
            item.ok = False
            item.lines += list(refusals)
        item.note += "".join(f"; warning: {w}" for w in warnings)
    return skipped


def _check_memory(results: list[FileResult], sweeps: dict, verl_runs: dict[Path, list]) -> str:
    """Every configuration fits its GPUs: a refusal at the line of the field (the breakdown and the
    levers), a warning within 10% of the GPU; why the memory was not estimated (said once), or ''."""
    from cancelctl.backends.verl.memory_check import estimate_runs

    skipped = ""
    for item in results:
        runs, sweep = verl_runs.get(item.path, []), sweeps.get(item.path)
        if not runs:
            continue
        checks, why = estimate_runs(runs)
        skipped = skipped or why
        refusals: dict[str, list[str]] = {}  # "where: message" (where: its first configuration's) -> configurations
        first: dict[str, str] = {}
        warnings: dict[str, list[str]] = {}
        for run in runs:
            check = checks.get(run.run_id)
            if check is None:
                continue
            if (refusal := check.refusal()) is not None:
                where = first.setdefault(refusal, f"{sweep.location_of(run.arm, check.field)}: {refusal}")
                of = refusals.setdefault(where, [])
            elif (warning := check.warning()) is not None:
                of = warnings.setdefault(warning, [])
            else:
                continue
            label = ", ".join(filter(None, [f"arm {run.arm}", run.group]))
            if label not in of:
                of.append(label)
        if refusals:
            title = "configurations that do not fit the GPU's memory"
            item.title = title if item.ok else f"{item.title}; {title}"
            item.ok = False
            item.lines += [f"{refusal} [{'; '.join(of)}]" for refusal, of in refusals.items()]
        item.note += "".join(f"; warning: {w} [{'; '.join(of)}]" for w, of in warnings.items())
    return skipped


def _compose_verl(results: list[FileResult], verl_runs: dict[Path, list], progress=None) -> str:
    from cancelctl.backends.verl import validate_runs, verl_available

    if not verl_available():
        return "verl layer skipped: verl is not installed (pip install 'cancelctl[verl]')"
    # One call for all files: verl is imported once and identical override sets compose once.
    outcome = validate_runs([run for runs in verl_runs.values() for run in runs], progress=progress)
    by_run: dict[str, list[str]] = {}
    for issue in outcome:
        by_run.setdefault(issue.run_id, []).append(str(issue))
    for item in results:
        runs = verl_runs.get(item.path, [])
        problems = [line for run in runs for line in by_run.get(run.run_id, [])]
        if problems:
            item.ok = False
            item.title = "verl config does not compose"
            item.lines = problems
        elif runs:
            item.note += ", verl config composed"
    return outcome.status
