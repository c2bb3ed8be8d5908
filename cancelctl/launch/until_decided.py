"""`cancelctl sweep FILE --until-decided`: add seeds in rounds to the arms of the claims still
undecided, until every claim is decided or the seed budget is spent.

A round is an ordinary launch (`launch_sweep`) of the sweep file's runs plus every seed the rounds
have added: finished runs are skipped, so a round submits only its new seeds — on SLURM one new job
array. The state lives on disk only, never in this process: the record of the rounds
(`cancelctl.seed_rounds`, written before a round is submitted) and the runs, which `judge` reads
(the report's judging, handed in by the CLI: launch never imports the report). One call:

 1. load the record, or start it from the sweep file's seeds (look 1);
 2. launch the runs of every look so far and wait for them: after an interruption (Ctrl-C, a lost
    terminal, a killed process) a rerun submits what is missing and follows what still runs;
 3. judge the claims at every look (`judge`: `cancelctl.stats.sequential_verdicts`, the safe
    t-test's e-process, anytime-valid, Bonferroni across the claims);
 4. the paired claims still undecided whose two arms have fewer than `max_seeds` seeds get a round:
    `batch` new seeds (fewer where the budget ends) for both arms in the claim's comparison group,
    recorded, then back to 2. Otherwise stop: every claim decided, or the budget spent.

With `wait=False` (SLURM's `--no-wait`) a call submits what the current look lacks and returns;
run it again once those runs have ended to judge them and submit the next round.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from cancelctl.errors import ArgumentError, SpecError
from cancelctl.launch.launcher import LaunchResult, Progress, launch_sweep
from cancelctl.runstate import ACTIVE, FAILED, RunState
from cancelctl.seed_rounds import Cell, SeedRounds, load_seed_rounds, save_seed_rounds
from cancelctl.spec.claim_metric import OUTCOME_KINDS
from cancelctl.spec.expand import Sweep, with_seeds
from cancelctl.stats.evidence import ALPHA
from cancelctl.stats.sequential_verdicts import SequentialVerdict
from cancelctl.workdir import sweep_paths

log = logging.getLogger("cancelctl.launch")

DEFAULT_BATCH = 2
# a sweep judged until decided: the rows of every look, from the runs on disk
Judge = Callable[[SeedRounds], list[SequentialVerdict]]

DECIDED = "every claim decided"
BUDGET_SPENT = "seed budget spent"
NOTHING_TO_ADD = "no undecided claim can use more seeds"
RUNS_FAILED = "runs failed"
RUNS_CANCELLED = "runs cancelled"
STILL_RUNNING = "runs still running"


@dataclass
class UntilDecidedResult:
    sweep: str
    rounds: SeedRounds
    stopped: str  # why this call returned: DECIDED, BUDGET_SPENT, NOTHING_TO_ADD, RUNS_*, STILL_RUNNING
    launches: list[LaunchResult] = field(default_factory=list)
    verdicts: list[SequentialVerdict] = field(default_factory=list)  # at the last look judged
    warnings: list[str] = field(default_factory=list)

    @property
    def exit_code(self) -> int:
        """1 when runs failed, 3 when runs were cancelled, else 0 (decided, budget spent, still running)."""
        return 1 if self.stopped == RUNS_FAILED else 3 if self.stopped == RUNS_CANCELLED else 0


def planned_with_rounds(sweep: Sweep, workdir: Path) -> Sweep:
    """The sweep file's runs plus every seed its recorded rounds added (the file alone when it never
    ran until decided): what a plain `sweep` of it plans, so the added runs never turn stale."""
    rounds = load_seed_rounds(sweep_paths(Path(workdir).resolve(), sweep.name).seed_rounds)
    return sweep if rounds is None else with_seeds(sweep, rounds.added())


def run_until_decided(
    sweep: Sweep,
    *,
    workdir: Path,
    judge: Judge,
    max_seeds: int,
    batch: int = DEFAULT_BATCH,
    executor: str | None = None,
    retry_failed: bool = False,
    retry_stopped: bool = False,
    wait: bool = True,
    progress: Progress | None = None,
    alpha: float = ALPHA,
) -> UntilDecidedResult:
    """Run `sweep` in rounds of seeds until its claims are decided (the module's docstring). Bad
    arguments (no claims, fewer than 2 seeds, a budget below the file's seeds, a record of other
    seeds): SpecError / ArgumentError, nothing submitted."""
    _check_arguments(sweep, max_seeds, batch)
    paths = sweep_paths(Path(workdir).resolve(), sweep.name)
    rounds = _start_or_resume(paths.seed_rounds, sweep, batch, max_seeds, alpha)
    result = UntilDecidedResult(sweep.name, rounds, STILL_RUNNING)
    while True:
        planned = with_seeds(sweep, rounds.added())
        launch = launch_sweep(planned, workdir=paths.workdir, executor=executor, wait=wait, progress=progress,
                              retry_failed=retry_failed, retry_stopped=retry_stopped)
        result.launches.append(launch)
        retry_failed = retry_stopped = False  # a retry is for the runs there when asked, not the next rounds'
        stop = _why_not_judged(launch, planned)
        if stop is not None:
            result.stopped = stop
            return result
        result.verdicts = judge(rounds)
        added, why = next_round(result.verdicts, rounds, batch, max_seeds)
        if not added:
            result.stopped = why
            return result
        rounds = rounds.with_round(added)
        save_seed_rounds(paths.seed_rounds, rounds)  # before its runs are submitted: a rerun resumes here
        result.rounds = rounds
        log.info("%s: look %d adds seeds %s", sweep.name, rounds.n_looks,
                 "; ".join(f"{arm}{f' ({group})' if group else ''}: {seeds}" for (arm, group), seeds in added.items()))


def next_round(
    verdicts: list[SequentialVerdict], rounds: SeedRounds, batch: int, max_seeds: int
) -> tuple[dict[Cell, list[int]], str]:
    """The seeds of the next round per (arm, group) — empty when none is needed — and why none is:
    every paired claim decided, or the undecided ones' arms at `max_seeds` seeds. The new seeds are
    the `batch` seeds after every seed in use, the same for every arm (so claims stay paired); an arm
    gets as many as the tighter budget of the two arms of its claim allows."""
    look = rounds.n_looks
    fresh = list(range(rounds.next_seed(), rounds.next_seed() + batch))
    take: dict[Cell, int] = {}
    budget_hit = False
    for row in verdicts:
        if not row.wants_seeds or row.verdict.kind in OUTCOME_KINDS:
            continue
        v = row.verdict
        cells = list(dict.fromkeys([(v.arm, v.group), (v.versus, v.group)]))
        room = min(max_seeds - len(rounds.seeds_at(look, arm, group)) for arm, group in cells)
        if room <= 0:
            budget_hit = True
            continue
        for cell in cells:
            take[cell] = max(take.get(cell, 0), min(batch, room))
    if take:
        return {cell: fresh[:n] for cell, n in take.items()}, ""
    return {}, BUDGET_SPENT if budget_hit else DECIDED if all(_settled(r) for r in verdicts) else NOTHING_TO_ADD


def _settled(row: SequentialVerdict) -> bool:
    """Decided, or not the e-process's to decide (an outcome claim; a row that cannot be judged)."""
    return row.decided_at is not None or not row.evaluable


def _why_not_judged(launch: LaunchResult, planned: Sweep) -> str | None:
    """Why the look cannot be judged yet: runs failed or cancelled, or still queued or running."""
    if launch.failed:
        return RUNS_FAILED
    if launch.cancelled:
        return RUNS_CANCELLED
    ids = {run.run_id for run in planned.runs}
    states: list[RunState] = [s for s in launch.states if s.run_id in ids]
    if any(s.state == FAILED for s in states) or launch.skipped_failed:
        return RUNS_FAILED
    if any(s.state in ACTIVE for s in states) or len({s.run_id for s in states}) < len(ids):
        return STILL_RUNNING
    return None


def _check_arguments(sweep: Sweep, max_seeds: int, batch: int) -> None:
    seeds = sweep.spec.seeds
    if not sweep.spec.claims:
        raise SpecError(f"{sweep.file}: --until-decided needs claims to decide; the sweep file has none",
                        title="nothing to decide")
    if len(seeds) < 2:
        raise SpecError(f"{sweep.file}: --until-decided needs at least 2 seeds in the sweep file (a paired "
                        f"difference has no spread from one seed); it has {len(seeds)}", title="too few seeds")
    if batch < 1:
        raise ArgumentError(f"--batch {batch}: must be at least 1")
    if max_seeds < len(seeds):
        raise ArgumentError(f"--max-seeds {max_seeds}: below the sweep file's {len(seeds)} seeds")


def _start_or_resume(path: Path, sweep: Sweep, batch: int, max_seeds: int, alpha: float) -> SeedRounds:
    """The recorded rounds (batch and budget updated to this call's: an e-process stays valid whatever
    decides when to stop), or a new record of the sweep file's seeds. A record of other seeds or
    another α is refused: its looks would no longer be the ones judged."""
    rounds = load_seed_rounds(path)
    if rounds is None:
        rounds = SeedRounds(sweep.name, list(sweep.spec.seeds), batch, max_seeds, alpha)
        path.parent.mkdir(parents=True, exist_ok=True)
        save_seed_rounds(path, rounds)
        return rounds
    if sorted(rounds.initial_seeds) != sorted(sweep.spec.seeds):
        raise SpecError(
            f"{sweep.file}: seeds {sorted(sweep.spec.seeds)} differ from the {sorted(rounds.initial_seeds)} its "
            f"--until-decided rounds started from ({path}); restore them, or move that file aside to start the "
            "rounds over (finished runs are reused)", title="the sweep file's seeds changed")
    if rounds.alpha != alpha:
        raise SpecError(f"{path}: recorded at α = {rounds.alpha}, not {alpha}", title="the sweep's α changed")
    if (rounds.batch, rounds.max_seeds) != (batch, max_seeds):
        rounds.batch, rounds.max_seeds = batch, max_seeds
        save_seed_rounds(path, rounds)
    return rounds
