"""Sweep expansion: a sweep file becomes RunSpecs with stable run ids, checked for compute matching.

arms × (grid cartesian product × zip rows) × seeds. Every (arm, point) is validated as a full
`ExperimentSpec`; validation errors are traced back to the YAML line that supplied the bad value
(the arm patch, the grid axis, or the base: `issues`). Runs are `RunSpec`s (`run`); arms that
resolve to the same run are refused, and arms of one comparison group must plan the same compute.
"""

from __future__ import annotations

import copy
import itertools
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from cancelctl.errors import SpecError, SpecIssue, UnmatchedArmsError
from cancelctl.names import MAX_NAME_LENGTH
from cancelctl.spec.experiment import MATCHED_ON, ExperimentSpec
from cancelctl.spec.issues import check_arm_axis_overlaps, check_axis_paths, check_claim_axes, run_issues, sweep_issues
from cancelctl.spec.run import RunSpec, group_label, make_run
from cancelctl.spec.sweep import SweepSpec
from cancelctl.spec.yamlpos import Location, YamlSyntaxError, load_yaml_file


@dataclass
class Sweep:
    spec: SweepSpec
    file: str
    runs: list[RunSpec] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)
    arm_locations: dict[str, Location] = field(default_factory=dict)  # where each arm is in the file
    positions: dict[tuple, Location] = field(default_factory=dict, repr=False)  # every key's place

    def location_of(self, arm: str, dotted: str) -> Location:
        """Where an arm's value of `dotted` (e.g. data.train_files) is written: the arm's own patch,
        else the base, else the arm, else the file."""
        keys = tuple(dotted.split("."))
        for where in (("arms", arm, *keys), ("base", *keys)):
            if where in self.positions:
                return self.positions[where]
        return self.arm_locations.get(arm) or Location(self.file, 1, 1)

    @property
    def name(self) -> str:
        return self.spec.name

    def groups(self) -> dict[str, list[RunSpec]]:
        out: dict[str, list[RunSpec]] = {}
        for run in self.runs:
            out.setdefault(run.group, []).append(run)
        return out


# ---------------------------------------------------------------- loading


def load_sweep(path: str | Path, *, allow_unmatched: bool = False) -> Sweep:
    """Parse, validate and expand a sweep file. Raises SpecError (exit 2) on any bad input."""
    path = Path(path)
    if path.is_dir():  # `cancelctl validate experiments/`: say what it is and what to pass instead
        found = sorted(p.name for p in path.glob("*.y*ml"))
        listed = ", ".join(found[:4]) + (", ..." if len(found) > 4 else "")
        hint = f": pass a sweep file in it ({listed})" if found else ": pass a sweep file (.yaml)"
        raise SpecError(SpecIssue(None, "", f"{path}: a directory, not a sweep file{hint}"))
    if not path.is_file():
        raise SpecError(SpecIssue(None, "", f"{path}: no such file" if not path.exists() else f"{path}: not a regular file"))
    try:
        data, positions = load_yaml_file(path)
    except YamlSyntaxError as exc:
        raise SpecError(SpecIssue(exc.location, "", exc.message)) from None
    return expand(data, positions, str(path), allow_unmatched=allow_unmatched)


def expand(data: Any, positions: dict, file: str, *, allow_unmatched: bool = False) -> Sweep:
    top = Location(file, 1, 1)
    if not isinstance(data, dict):
        raise SpecError(SpecIssue(top, "", "a sweep file must be a mapping with name, base, arms, ..."))
    try:
        sweep_spec = SweepSpec.model_validate(data)
    except ValidationError as exc:
        raise SpecError(sweep_issues(exc, positions, file)) from None
    check_axis_paths(sweep_spec, positions, file)
    check_arm_axis_overlaps(sweep_spec, positions, file)
    check_claim_axes(sweep_spec, positions, file)

    points = list(_axis_points(sweep_spec))
    issues: list[SpecIssue] = []
    seen: set[tuple] = set()
    sweep = Sweep(spec=sweep_spec, file=file, positions=positions)
    sweep.arm_locations = {arm: positions[("arms", arm)] for arm in sweep_spec.arms if ("arms", arm) in positions}
    by_hash: dict[str, str] = {}
    for arm, patch in sweep_spec.arms.items():
        merged_arm = deep_merge(sweep_spec.base, patch)
        for axes in points:
            resolved = copy.deepcopy(merged_arm)
            for dotted, value in axes.items():
                set_dotted(resolved, dotted, value)
            try:
                spec = ExperimentSpec.model_validate(resolved)
            except ValidationError as exc:
                for issue in run_issues(exc, positions, file, arm, axes, sweep_spec):
                    key = (str(issue.location), issue.path, issue.message)
                    if key not in seen:
                        seen.add(key)
                        issues.append(issue)
                continue
            group = group_label(axes)
            for seed in sweep_spec.seeds:
                run = make_run(sweep_spec.name, arm, axes, seed, spec, group)
                if len(run.name) > MAX_NAME_LENGTH:
                    issue = SpecIssue(
                        positions.get(("arms", arm), top),
                        f"arms.{arm}",
                        f"run name {run.name[:40]!r}... (arm, axis values, seed) is {len(run.name)} characters long; "
                        f"at most {MAX_NAME_LENGTH}: shorten the arm's name or the axis values",
                    )
                    if (str(issue.location), issue.path) not in seen:
                        seen.add((str(issue.location), issue.path))
                        issues.append(issue)
                    continue
                other = by_hash.get(run.run_id)
                if other is not None:
                    issues.append(
                        SpecIssue(
                            positions.get(("arms", arm)),
                            f"arms.{arm}",
                            f"resolves to the same run as {other} (identical spec and seed): arms must differ",
                        )
                    )
                    continue
                by_hash[run.run_id] = run.name
                sweep.runs.append(run)
    if issues:
        raise SpecError(issues)
    mismatches = compute_mismatches(sweep)
    if mismatches:
        if not allow_unmatched:
            raise UnmatchedArmsError(mismatches)
        sweep.warnings.extend(str(m) for m in mismatches)
    return sweep


def with_seeds(sweep: Sweep, added: dict[tuple[str, str], list[int]]) -> Sweep:
    """`sweep` with more seeds for some (arm, comparison group) cells (`sweep --until-decided`): each
    new run is the cell's run with another seed (same resolved spec, its own run id), after the
    file's runs. A seed the cell has already is skipped; a cell the sweep does not have is an error."""
    firsts: dict[tuple[str, str], RunSpec] = {}
    for run in sweep.runs:
        firsts.setdefault((run.arm, run.group), run)
    unknown = sorted(cell for cell in added if cell not in firsts)
    if unknown:
        listed = ", ".join(f"{arm} ({group or 'no group'})" for arm, group in unknown)
        raise SpecError(f"sweep {sweep.name}: no arm and group {listed} in the sweep file to add seeds to")
    have = {(run.arm, run.group, run.seed) for run in sweep.runs}
    runs = list(sweep.runs)
    for (arm, group), seeds in added.items():
        first = firsts[(arm, group)]
        for seed in seeds:
            if (arm, group, seed) not in have:
                have.add((arm, group, seed))
                runs.append(make_run(sweep.name, arm, first.axes, seed, first.spec, group))
    return replace(sweep, runs=runs)


def compute_mismatches(sweep: Sweep) -> list[SpecIssue]:
    """Arms sharing a grid point must match on G and on their budget axis [D §4.5]: generated-token
    budget and update steps for step budgets, the compute a compute budget names (`MATCHED_ON`)."""
    issues = []
    for group, runs in sweep.groups().items():
        per_arm, axis = {}, {}
        for run in runs:
            per_arm.setdefault(run.arm, run.planned_compute())
            axis.setdefault(run.arm, run.spec.budget.axis)
        arms = list(per_arm)
        ref = arms[0]
        for arm in arms[1:]:
            if axis[ref] != axis[arm]:
                diffs = [f"budget {axis[ref]} vs {axis[arm]}"]
            else:
                diffs = [
                    f"{k} {per_arm[ref][k]:,} vs {per_arm[arm][k]:,}"
                    for k in ("G", *MATCHED_ON[axis[ref]])
                    if per_arm[ref][k] != per_arm[arm][k]
                ]
            if diffs:
                where = f"group {group}" if group else "sweep"
                issues.append(SpecIssue(None, f"arms.{arm}", f"{where}: {ref} vs {arm} differ: " + "; ".join(diffs)))
    return issues


# ---------------------------------------------------------------- dict helpers


def deep_merge(base: dict[str, Any], patch: dict[str, Any]) -> dict[str, Any]:
    """Arm patches merge into base recursively; a non-mapping value replaces."""
    out = copy.deepcopy(base)
    for key, value in (patch or {}).items():
        if isinstance(value, dict) and isinstance(out.get(key), dict):
            out[key] = deep_merge(out[key], value)
        else:
            out[key] = copy.deepcopy(value)
    return out


def set_dotted(data: dict[str, Any], dotted: str, value: Any) -> None:
    keys = dotted.split(".")
    node = data
    for key in keys[:-1]:
        nxt = node.get(key)
        if not isinstance(nxt, dict):
            nxt = {}
            node[key] = nxt
        node = nxt
    node[keys[-1]] = copy.deepcopy(value)


def _axis_points(sweep: SweepSpec):
    grid_paths = list(sweep.grid)
    zip_rows = [dict(zip(sweep.zip, row)) for row in zip(*sweep.zip.values())] if sweep.zip else [{}]
    for combo in itertools.product(*(sweep.grid[p] for p in grid_paths)) if grid_paths else [()]:
        for zrow in zip_rows:
            point = dict(zip(grid_paths, combo))
            point.update(zrow)
            yield point
