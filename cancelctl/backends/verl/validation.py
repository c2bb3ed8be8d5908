"""`cancelctl validate`'s verl layers (`cancelctl.backends.validate` runs them through
`VerlBackend.validate_files`): 3, composing each unique override set against verl's installed Hydra
config (offline); 4, the data files, what verl reads in every row, and the prompts verl keeps under
`data.max_prompt_length` with the model's tokenizer and chat template (`verl.prompt_lengths`); 5, each
configuration's per-GPU memory against `cluster.gpu_memory_gb`, from the model's config.json
(`verl.memory_check`). And the warning on an arm running one of verl's built-in losses in a way that
differs from the paper its name cites (`verl.builtin_losses`).
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from collections.abc import Callable

    from cancelctl.backends.protocol import FileResult, ValidateOptions, ValidationStatus


def validate_files(results: list[FileResult], sweeps: dict, verl_runs: dict[Path, list], options: ValidateOptions,
                   progress: Callable[[str], None] | None = None) -> ValidationStatus:
    """Layers 3 to 5 on each file's verl runs, marking its result; the statuses said once."""
    status = _compose_verl(results, verl_runs, progress) if options.compose else "verl layer skipped (--skip-verl)"
    data_status = memory_status = ""
    if options.check_data:
        _check_data(results, sweeps, verl_runs)
        if progress is not None:
            progress("measuring the prompts under the model's chat template")
        data_status = _check_prompt_lengths(results, sweeps, verl_runs, options.model)
    else:
        status = "; ".join(filter(None, [status, "data files not read (--skip-data)"]))
    if options.check_memory:
        memory_status = _check_memory(results, sweeps, verl_runs)
    return status, data_status, memory_status


def builtin_loss_warnings(runs) -> list[str]:
    """An arm running one of verl's built-in losses where verl's defaults or its settings make it another
    objective than the paper its name cites (`backends.verl.builtin_losses`): a warning with the setting
    to write, not a refusal (it may be the comparison the sweep is for)."""
    if not any(run.spec.algorithm.verl_loss_mode for run in runs):
        return []
    from cancelctl.backends.verl.builtin_losses import builtin_loss_warnings as warnings

    return warnings(runs)


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
