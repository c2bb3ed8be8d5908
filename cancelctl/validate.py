"""`cancelctl validate`: every layer a spec must pass before anything is submitted.

1. YAML + pydantic schema (file:line:col, field path), 2. sweep expansion and the compute-matched
check, 3. for verl runs, composing each unique override set against verl's installed Hydra config
(offline). Layer 3 is reported as skipped when verl is not installed; CI installs it.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from cancelctl.errors import SpecError
from cancelctl.plan import load_sweep


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

    @property
    def ok(self) -> bool:
        return all(f.ok for f in self.files)


def validate_files(paths: list[Path], *, allow_unmatched: bool = False, compose_verl: bool = True) -> ValidationReport:
    results: list[FileResult] = []
    verl_runs: dict[Path, list] = {}
    for path in paths:
        try:
            sweep = load_sweep(path, allow_unmatched=allow_unmatched)
        except SpecError as exc:
            results.append(FileResult(path, False, title=exc.title, lines=exc.render(limit=10**6).splitlines()))
            continue
        note = f", NOT compute-matched: {len(sweep.warnings)} warnings" if sweep.warnings else ""
        results.append(FileResult(path, True, n_runs=len(sweep.runs), note=note))
        runs = [r for r in sweep.runs if r.spec.backend == "verl"]
        if runs:
            verl_runs[path] = runs
    status = ""
    if verl_runs:
        status = _compose_verl(results, verl_runs) if compose_verl else "verl layer skipped (--skip-verl)"
    return ValidationReport(results, status)


def _compose_verl(results: list[FileResult], verl_runs: dict[Path, list]) -> str:
    from cancelctl.backends.verl import validate_runs, verl_available

    if not verl_available():
        return "verl layer skipped: verl is not installed (pip install 'cancelctl[verl]')"
    n_runs = 0
    for item in results:
        runs = verl_runs.get(item.path)
        if not runs:
            continue
        n_runs += len(runs)
        problems = validate_runs(runs)
        if problems:
            item.ok = False
            item.title = "verl config does not compose"
            item.lines = [str(p) for p in problems]
        else:
            item.note += ", verl config composed"
    return f"verl layer: composed {n_runs} runs against verl's installed config"
