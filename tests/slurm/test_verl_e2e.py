"""verl's real `main_ppo`, launched by `cancelctl sweep --executor slurm` on the CI cluster, on CPU
(`cluster.device: cpu`: cancelctl's CPU platform and Hugging Face rollout, loaded by the package's
`verl.plugins` entry points), then `cancelctl report` on what it logged.

Nothing here stands in for verl: rollout, reward, GRPO advantages, old log-probs, the FSDP2 actor
update through the `cancel_*` losses, the weight sync to the rollout and verl's file logger all run
for real, on a tiny random Qwen2 and data the test builds (tiny_verl.py; no download).

A verl run costs ~100 CPU-seconds before its first step (about eight processes each importing verl,
torch and transformers) and ~5 GiB, so every scenario shares the fewest runs that can show it, and
both sweeps are submitted at once when the module starts:
- one sweep with the issue's arms — grpo, gspo, dfpo (min_replace: whole groups per micro-batch),
  GSPO with δ injected and TIS, reward_balanced under a rare 0/1 reward (its sampler must generate
  more than one round a step and discard groups) — where grpo is also the run `scontrol requeue`
  interrupts, plus a run whose reward raises and a long run that `cancelctl cancel` ends;
- one two-node run (the Ray head and worker cancelctl starts over the allocation) that a monitor `stop` rule
  ends after two steps, launched with `sweep --wait`.
`cluster.array_parallelism` runs at most three of the first sweep at once.
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
import uuid
from pathlib import Path

import pytest
import yaml
from polling import wait_until
from slurm_gate import MULTI_PARTITION, cluster_problem, multi_node_problem

from cancelctl.jobs.outcome import read_attempts, read_error
from cancelctl.launch import cancel_sweep, sweep_status
from cancelctl.jobs.raycluster import CLUSTER_JSON, processes_using
from cancelctl.tracking import default_tracking_uri
from cancelctl.workdir import known_sweeps, sweep_paths

_PROBLEM = cluster_problem()
pytestmark = [
    pytest.mark.slurm,
    pytest.mark.verl,
    pytest.mark.skipif(_PROBLEM is not None, reason=_PROBLEM or ""),
    pytest.mark.timeout(1800),  # minutes of verl start-up on 2 cores; every wait has its own bound
]

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "backends" / "verl"))
from tiny_verl import PROMPTS_PER_STEP, build_tiny_verl

CLI = Path(sys.executable).with_name("cancelctl")
STEPS = 3
G = 4
# 1 when the response holds one of the ground truth's first two letters: ~1 rollout in 8 of the
# random tiny model, so most groups tie (no signal) and reward_balanced needs more rounds.
RARE_REWARD = '''\
def compute_score(data_source, solution_str, ground_truth, extra_info=None):
    return float(any(c in solution_str for c in ground_truth[:2]))
'''
BAD_REWARD = """\
def compute_score(data_source, solution_str, ground_truth, extra_info=None):
    raise ValueError("reward broke on purpose: " + ground_truth)
"""


def cli(*args: str, timeout: float = 900) -> subprocess.CompletedProcess:
    return subprocess.run([str(CLI), *args], capture_output=True, text=True, timeout=timeout, check=False)


def verl_sweep(directory: Path, tiny, arms: dict, *, steps: int = STEPS, base: dict | None = None) -> Path:
    name = f"verl-e2e-{uuid.uuid4().hex[:6]}"  # the accounting DB outlives test runs
    spec = {
        "name": name,
        "base": {
            "backend": "verl",
            "executor": "slurm",
            "model": {"path": str(tiny.model), "strategy": "fsdp2", "gradient_checkpointing": False},
            "data": {
                "train_files": [str(tiny.train)],
                "val_files": [str(tiny.val)],
                "benchmarks": ["tiny"],
                "max_prompt_length": 64,
                "max_response_length": 16,
                "reward_function": f"{tiny.reward}:{tiny.reward_name}",
            },
            # two mini-batches a step: the second is off-policy, so a group's weights can differ
            "algorithm": {"lr": 1.0e-3, "mini_batch_size": PROMPTS_PER_STEP // 2, "micro_batch_size_per_gpu": PROMPTS_PER_STEP // 2 * G},
            "rollout": {"G": G},
            "budget": {"steps": steps, "prompts_per_step": PROMPTS_PER_STEP},
            "eval": {"every": steps, "k": 1},
            # ~5 GiB a run: at most three at once (the CI cluster does not count memory)
            "cluster": {"device": "cpu", "cpus_per_task": 2, "mem_gb": 6, "time_min": 20, "array_parallelism": 3},
            **(base or {}),
        },
        "arms": arms,
        "seeds": [0],
    }
    path = directory / f"{name}.yaml"
    path.write_text(yaml.safe_dump(spec, sort_keys=False))
    return path


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    out = tmp_path_factory.mktemp("tiny-verl")
    made = build_tiny_verl(out, steps=STEPS * 8)  # reward_balanced draws extra prompts each round
    rare = out / "rare_reward.py"
    rare.write_text(RARE_REWARD)
    bad = out / "bad_reward.py"
    bad.write_text(BAD_REWARD)
    return made, rare, bad


# checkpoints every 2 steps; requeued once step 3 is logged. On 2 loaded cores the requeue can land a
# few steps later (CI saw it after step 5 of 5): 8 steps leave room for verl to resume mid-run.
REQUEUED_STEPS = 8
TRAINING_ARMS = ("grpo", "gspo", "dfpo", "gspo-delta-tis", "reward-balanced")


@pytest.fixture(scope="module")
def launched(tmp_path_factory, tiny, template_db):
    """Both sweeps, submitted before any test waits: (work dir, main sweep, two-node sweep, its `--wait`).
    Every sweep still running at teardown is cancelled, so a failed test leaves no job."""
    made, rare, bad = tiny
    root = tmp_path_factory.mktemp("verl-e2e")
    workdir = root / "work"
    workdir.mkdir()
    (workdir / "mlflow.db").write_bytes(Path(template_db).read_bytes())
    main = verl_sweep(root, made, {
        "grpo": {"algorithm": {"loss": "grpo"}, "budget": {"steps": REQUEUED_STEPS, "checkpoint_every": 2}},
        "gspo": {"algorithm": {"loss": "gspo"}},
        "dfpo": {"algorithm": {"loss": "dfpo", "dfpo": {"transform": "min_replace"}}},
        "gspo-delta-tis": {"algorithm": {"loss": "gspo", "inject_delta": {"delta": 3.0}, "tis": {"cap": 2.0}}},
        "reward-balanced": {
            "batching": {"strategy": "reward_balanced", "min_frac": 0.25},
            "data": {"reward_function": f"{rare}:compute_score"},
        },
        "bad-reward": {"data": {"reward_function": str(bad)}},
        "long": {"budget": {"steps": 200}},  # only ever cancelled
    })
    two_nodes = verl_sweep(root, made, {"two-nodes": {
        "budget": {"steps": 4, "checkpoint_every": 1},
        # verl's actor/entropy (~5.5 nats) is below the floor: the rule stops the run at step 2
        "monitor": {"entropy_collapse": {"floor": 100.0, "window": 2}},
    }}, base={
        "cluster": {"device": "cpu", "nodes": 2, "partition": MULTI_PARTITION, "cpus_per_task": 2, "time_min": 20},
        # each rank holds half of a mini-batch (4 prompts x G 4 / 2 = 8 rows): micro-batches of 8
        "algorithm": {"lr": 1.0e-3, "mini_batch_size": PROMPTS_PER_STEP // 2, "micro_batch_size_per_gpu": PROMPTS_PER_STEP // 2 * G // 2},
    })
    names = [yaml.safe_load(p.read_text())["name"] for p in (main, two_nodes)]
    submitted = cli("sweep", str(main), "--workdir", str(workdir), "--no-wait", "--allow-unmatched")
    assert submitted.returncode == 0, submitted.stdout + submitted.stderr
    waiting = None
    if multi_node_problem(2) is None:
        waiting = subprocess.Popen([str(CLI), "sweep", str(two_nodes), "--workdir", str(workdir), "--wait"],
                                   stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    yield workdir, names[0], names[1], waiting
    if waiting is not None and waiting.poll() is None:
        waiting.kill()
    for sweep in known_sweeps(workdir):
        if any(s.active for s in sweep_status(workdir, sweep)):
            cancel_sweep(workdir, sweep)


def metric_history(workdir: Path, sweep: str) -> dict[str, dict[str, dict[int, float]]]:
    """arm -> key -> step -> value, from the MLflow store (what `report` reads)."""
    import mlflow

    client = mlflow.MlflowClient(default_tracking_uri(workdir))
    experiment = client.get_experiment_by_name(sweep)
    out: dict[str, dict[str, dict[int, float]]] = {}
    for run in client.search_runs([experiment.experiment_id]):
        arm = run.data.tags["cancelctl.arm"]
        out[arm] = {}
        for key in run.data.metrics:
            history = client.get_metric_history(run.info.run_id, key)
            steps = [m.step for m in history]
            assert len(steps) == len(set(steps)), f"{arm}: {key} logged twice at one step: {sorted(steps)}"
            out[arm][key] = {m.step: m.value for m in history}
    return out


def job_processes(job_id: str) -> list[int]:
    """pids of every process of SLURM array task `job_id` ('85_3': Ray's raylet, GCS and workers, verl's
    driver, ...): whatever the task started carries its array job and task ids in its environment."""
    array_job, task = job_id.split("_")
    needles = {f"SLURM_ARRAY_JOB_ID={array_job}".encode(), f"SLURM_ARRAY_TASK_ID={task}".encode()}
    pids = []
    for proc in Path("/proc").iterdir():
        if proc.name.isdigit():
            try:
                if needles <= set((proc / "environ").read_bytes().split(b"\0")):
                    pids.append(int(proc.name))
            except OSError:
                continue
    return pids


def states(workdir: Path, sweep: str) -> dict[str, object]:
    return {s.name.split("-s0")[0]: s for s in sweep_status(workdir, sweep)}


def logged_steps(run_dir: Path) -> list[int]:
    path = run_dir / "metrics.jsonl"
    return [json.loads(line)["step"] for line in path.open()] if path.exists() else []


def ray_leftovers(job_id: str) -> dict[int, list[int]]:
    """rank -> pids of processes still naming that rank's Ray temp dir (raylet, gcs_server, workers)."""
    left = {rank: processes_using(f"/tmp/ray-cc-{job_id}-{rank}") for rank in (0, 1)}
    return {rank: pids for rank, pids in left.items() if pids}


def run_dirs(workdir: Path, sweep: str) -> dict[str, Path]:
    return {d.name.split("-s0__")[0]: d for d in sweep_paths(workdir, sweep).runs_dir.iterdir()}


def test_a_verl_sweep_trains_on_real_main_ppo_under_slurm_requeues_cancels_and_reports(tmp_path, launched):
    workdir, sweep, _, _ = launched
    t0 = time.monotonic()
    dirs = wait_until(lambda: (d := run_dirs(workdir, sweep)) and len(d) == 7 and d, 120, "the run folders")

    # requeue: `scontrol requeue` of grpo once step 3 is logged (after verl's checkpoint of step 2)
    def three_steps_of_grpo():
        grpo = states(workdir, sweep)["grpo"]
        assert grpo.active or grpo.state == "completed", grpo.reason  # a failed run fails the test now
        return len(logged_steps(dirs["grpo"])) >= 3

    wait_until(three_steps_of_grpo, 900, "3 steps of grpo")
    subprocess.run(["scontrol", "requeue", states(workdir, sweep)["grpo"].job_id], check=True, capture_output=True, timeout=30)

    ended = (*TRAINING_ARMS, "bad-reward")
    final = wait_until(lambda: (now := states(workdir, sweep)) and all(not now[a].active for a in ended) and now,
                       1500, "every run but the long one to end", poll_s=2)
    took = time.monotonic() - t0

    # cancel: nothing of the job is left — no verl driver, Ray GCS, raylet or worker
    wait_until(lambda: logged_steps(dirs["long"]), 600, "a step of the long run")
    long_job = states(workdir, sweep)["long"].job_id
    assert job_processes(long_job)
    assert cli("cancel", sweep, "--workdir", str(workdir)).returncode == 0
    wait_until(lambda: not job_processes(long_job), 60, f"every process of job {long_job} to end")
    assert states(workdir, sweep)["long"].state == "cancelled"

    for arm in TRAINING_ARMS:
        assert final[arm].state == "completed", (arm, final[arm].reason)
    history = metric_history(workdir, sweep)  # asserts one point per step and key (the requeue replays step 3)
    for arm in TRAINING_ARMS:
        keys, steps = history[arm], REQUEUED_STEPS if arm == "grpo" else STEPS
        assert set(keys["critic/score/mean"]) == set(range(1, steps + 1)), arm
        assert all(v > 0 for v in keys["actor/grad_norm"].values()), arm  # the update ran every step
        # the rollout has the trainer's weights after every update (weight sync): its log-probs match
        # the actor's recomputation, and its weight version is the step + 1
        assert max(keys["training/rollout_probs_diff_mean"].values()) < 1e-3, arm
        assert keys["mismatch/rho_std"] and keys["mismatch/pcc"] and keys["hacking/J"], arm  # from the rollout's log-probs
        tokens = keys["compute/gen_tokens"]
        assert keys["compute/gen_tokens_cum"][steps] == pytest.approx(sum(tokens.values())), arm  # each step once
        assert keys["compute/update_steps_cum"][steps] > 0, arm
        versions = [json.loads(line)["version"] for line in (dirs[arm] / "rollout_weights.jsonl").open()]
        if arm != "grpo":
            assert versions == list(range(1, steps + 2)), (arm, versions)  # the initial sync, then one per step
    dfpo = history["dfpo"]
    # whole groups: min_replace gives each group one weight, so Σ_i Â_i s̃_i = s̃ Σ_i Â_i = 0 in every group
    # and dfpo/weight_dispersion, over the groups with a non-zero Â (SPEC), is 0 (also asserted on
    # verl's real actor update: tests/backends/verl/test_verl_actor.py)
    assert max(dfpo["dfpo/ortho_residual"].values()) < 1e-5
    assert all(v == 0 for v in dfpo["batching/split_groups"].values())
    assert max(history["gspo"]["dfpo/weight_dispersion"].values()) > 0  # GSPO's weights vary in a group
    balanced = history["reward-balanced"]
    assert max(balanced["batching/gen_rounds"].values()) > 1
    assert balanced["batching/discarded_rollouts_cum"][STEPS] > 0
    tokens = balanced["compute/gen_tokens"]  # discarded rollouts count as compute
    assert all(tokens[s] >= balanced["batching/gen_tokens"][s] for s in tokens)

    # requeued: verl resumed from its own checkpoint (not from step 1), in a second attempt
    # whose weight versions go on from there; MLflow holds steps 1..5 once each (asserted above)
    second_attempt = [json.loads(line)["step"] for line in (dirs["grpo"] / "verl_metrics.jsonl").open()]
    assert min(second_attempt) > 1, second_attempt
    assert [a["event"] for a in read_attempts(dirs["grpo"])].count("start") == 2
    syncs = [json.loads(line) for line in (dirs["grpo"] / "rollout_weights.jsonl").open()]
    restart = next(i for i, sync in enumerate(syncs) if i and sync["version"] == 1)  # a new rollout server
    for attempt in (syncs[:restart], syncs[restart:]):  # each: the initial sync, then one per step
        assert [s["version"] for s in attempt] == list(range(1, len(attempt) + 1)), syncs
        first = attempt[0]["global_steps"]
        assert [s["global_steps"] for s in attempt] == list(range(first, first + len(attempt))), syncs
    # from one of its checkpoints (every 2 steps), never beyond the step the first attempt reached,
    # before the end, and on to the last step
    resumed_at, reached = syncs[restart]["global_steps"], syncs[restart - 1]["global_steps"]
    assert resumed_at % 2 == 0 and 0 < resumed_at <= reached and resumed_at < REQUEUED_STEPS, syncs
    assert syncs[-1]["global_steps"] == REQUEUED_STEPS, syncs

    # a worker's exception names itself in status and error.txt, not verl's generic trainer error
    assert final["bad-reward"].state == "failed"
    assert "ValueError: reward broke on purpose" in final["bad-reward"].reason, final["bad-reward"].reason
    kind, line = read_error(dirs["bad-reward"])
    assert kind == "FAILED" and "ValueError: reward broke on purpose" in line, line

    report_dir = tmp_path / "report"
    report = cli("report", sweep, "--workdir", str(workdir), "--out", str(report_dir), "--baseline", "gspo",
                 "--allow-unmatched")
    assert report.returncode == 0, report.stdout + report.stderr
    assert "2 run(s) left out" in report.stdout + report.stderr  # the failed and the cancelled run
    tables = report_dir / "tables"
    finals = json.loads((tables / "final_scores.json").read_text())["rows"]
    assert {row["arm"] for row in finals} == set(TRAINING_ARMS)  # verl's validation, avg@1 on the tiny val set
    mechanisms = json.loads((tables / "mechanisms.json").read_text())["rows"]
    assert {row["arm"] for row in mechanisms} == set(TRAINING_ARMS)
    mechanism = (report_dir / "report.md").read_text()
    for key in ("mismatch/rho_std", "hacking/J", "dfpo/weight_dispersion"):
        assert key in mechanism, key
    print(f"verl e2e sweep: 7 runs (one requeued), every run but the cancelled one ended in {took:.0f} s")


def test_one_verl_run_over_the_two_nodes_of_partition_multi_until_a_monitor_rule_stops_it(tmp_path, launched):
    """Ray head + worker on n1/n2, verl joining it with trainer.nnodes=2: data-parallel world size 2,
    one CPU training rank per node; the monitor's `stop` rule then ends verl on both nodes."""
    workdir, _, sweep, waiting = launched
    if waiting is None:
        pytest.skip(multi_node_problem(2) or "")
    out, _ = waiting.communicate(timeout=1500)
    assert waiting.returncode == 0 and "1 stopped" in out, out
    (state,) = sweep_status(workdir, sweep)
    assert state.state == "stopped", state.reason
    job_id = state.job_id.split("_")[0]
    run_dir = next(sweep_paths(workdir, sweep).runs_dir.iterdir())
    assert any((run_dir / "checkpoints").glob("global_step_*")), "the stopped run keeps its checkpoint"
    overrides = (run_dir / "hydra" / ".hydra" / "overrides.yaml").read_text()
    assert "trainer.nnodes=2" in overrides and "trainer.n_gpus_per_node=1" in overrides

    cluster = json.loads((run_dir / CLUSTER_JSON).read_text())
    assert [n["name"] for n in cluster["nodes"]] == ["n1", "n2"]
    assert [n["address"] for n in cluster["nodes"]] == ["127.0.1.1", "127.0.1.2"]
    ports = [set(n["ports"].values()) for n in cluster["nodes"]]
    assert not ports[0] & ports[1]  # both raylets on one machine: disjoint port blocks

    import mlflow

    client = mlflow.MlflowClient(default_tracking_uri(workdir))
    (run,) = client.search_runs([client.get_experiment_by_name(sweep).experiment_id])
    assert run.data.tags["cancelctl.ray.nodes"] == "n1,n2"  # each Ray task ran under its own slurmd
    assert float(run.data.tags["cancelctl.ray.join_s"]) == pytest.approx(cluster["joined_s"], abs=0.011)
    # the rule fired at step 2; verl may finish the step it was in before it stops
    assert json.loads((run_dir / "stopped.json").read_text())["step"] == 2
    assert {1, 2} <= {m.step for m in client.get_metric_history(run.info.run_id, "critic/score/mean")} <= {1, 2, 3}

    # one task over both nodes that ended cleanly; nothing of the job's Ray is left on either node
    acct = subprocess.run(["sacct", "-n", "-P", "-j", job_id, "-o", "JobID,State,NodeList"], check=False,
                          capture_output=True, text=True, timeout=30).stdout
    assert f"{job_id}_0|COMPLETED|n[1-2]" in acct, acct
    assert ray_leftovers(job_id) == {}
    assert not any(Path(f"/tmp/ray-cc-{job_id}-{rank}").exists() for rank in (0, 1))

    report = cli("report", sweep, "--workdir", str(workdir), "--out", str(tmp_path / "report"), "--baseline", "two-nodes",
                 "--include-stopped")
    assert report.returncode == 0 and "two-nodes" in report.stdout, report.stdout + report.stderr
