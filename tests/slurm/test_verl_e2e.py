"""verl's real `main_ppo`, launched by `cancelctl sweep --executor slurm` on the CI cluster, on CPU
(`cluster.device: cpu`: cancelctl's CPU platform and Hugging Face rollout, loaded by the package's
`verl.plugins` entry points), then `cancelctl report` on what it logged.

Nothing here stands in for verl: rollout, reward, GRPO advantages, old log-probs, the FSDP2 actor
update through the `cancel_*` losses, the weight sync to the rollout and verl's file logger all run
for real, on a tiny random Qwen2 and data the test builds (tiny_verl.py; no download).

A verl run costs ~80 CPU-seconds before its first step (about nine processes each importing verl,
torch and transformers) and ~4 GiB, and CI has two cores, so every scenario shares the fewest runs
that can show it, and both sweeps are submitted at once when the module starts:
- one sweep: grpo, the run a monitor `stop` rule ends after two steps; a run whose reward raises; and
  reward_balanced under a rare 0/1 reward (its sampler must generate more than one round a step and
  discard groups), also the run whose verl child the test freezes (SIGSTOP of verl's TaskRunner, where
  verl's training loop runs): the stall watchdog saves its stacks, `scontrol requeue`s it and cancelctl's
  sampler resumes with verl's checkpoint. It starts last (array order, two at a time), so it is still
  training when the test, after the two-node one, freezes it. Plain GSPO and DFPO (min_replace, whole groups) run through
  verl in README's first verl sweep (tests/test_readme.py, which checks DFPO's whole groups) and the
  plain-verl DFPO command (tests/backends/verl/test_verl_cpu_main_ppo.py);
- one two-node run (the Ray head and worker cancelctl starts over the allocation), GSPO with δ
  injected and TIS — so the mismatch mechanisms and the weight sync are shown over two ranks — that
  `cancelctl cancel` ends once it has trained two steps: nothing of it is left on either node.
`cluster.array_parallelism` runs at most two of the first sweep at once: three verl runs with the
two-node one, the most 24 GiB holds.
"""

from __future__ import annotations

from figures import record_figure
import json
import os
import signal
import subprocess
import sys
import time
import uuid
from pathlib import Path

import pytest
import yaml
from polling import wait_until
from slurm_gate import MULTI_PARTITION, cluster_problem, multi_node_problem
from stall_runs import stall_to_requeue_s

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


def cli(*args: str, timeout: float = 900, env: dict | None = None) -> subprocess.CompletedProcess:
    return subprocess.run([str(CLI), *args], capture_output=True, text=True, timeout=timeout, check=False, env=env)


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
            # ~5 GiB of RSS a run: two at once beside the two-node run (the CI cluster does not count memory)
            "cluster": {"device": "cpu", "cpus_per_task": 2, "mem_gb": 6, "time_min": 20, "array_parallelism": 2},
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


# 90 s without a step or a weight sync: a step of this run beside two others on 2 loaded cores is well under it
STALL_AFTER_MIN = 1.5
# checkpoints every 2 steps; frozen (then requeued by the watchdog) once step 3 is logged. On 2 loaded cores the requeue can land a
# few steps later (CI saw it after step 5 of 5): 8 steps leave room for verl to resume mid-run.
REQUEUED_STEPS = 8
REQUEUED = "reward-balanced"
STOPPED = "grpo"  # verl's actor/entropy (~5.5 nats) is below the rule's floor: stopped at step 2
STOPPED_BUDGET = 10
TRAINING_ARMS = ("grpo", "reward-balanced")
TWO_NODES = "two-nodes-gspo-delta-tis"


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
        "grpo": {"algorithm": {"loss": "grpo"}, "budget": {"steps": STOPPED_BUDGET, "checkpoint_every": 2},
                 "monitor": {"entropy_collapse": {"floor": 100.0, "window": 2}}},
        # fails at its first reward, so reward_balanced starts once it has: after the two-node test
        "bad-reward": {"data": {"reward_function": str(bad)}},
        "reward-balanced": {
            "batching": {"strategy": "reward_balanced", "min_frac": 0.25},
            "data": {"reward_function": f"{rare}:compute_score"},
            "budget": {"steps": REQUEUED_STEPS, "checkpoint_every": 2},
            "monitor": {"stall": {"after_min": STALL_AFTER_MIN, "retries": 1}},
        },
    })
    # cancelled once two steps are logged; the cap only bounds a run the test failed to cancel
    two_nodes = verl_sweep(root, made, {TWO_NODES: {"budget": {"steps": 40, "checkpoint_every": 1}}}, base={
        "cluster": {"device": "cpu", "nodes": 2, "partition": MULTI_PARTITION, "cpus_per_task": 2, "time_min": 20},
        # each rank holds half of a mini-batch (4 prompts x G 4 / 2 = 8 rows): micro-batches of 8
        "algorithm": {"lr": 1.0e-3, "mini_batch_size": PROMPTS_PER_STEP // 2, "micro_batch_size_per_gpu": PROMPTS_PER_STEP // 2 * G // 2,
                      "loss": "gspo", "inject_delta": {"delta": 3.0}, "tis": {"cap": 2.0}},
    })
    names = [yaml.safe_load(p.read_text())["name"] for p in (main, two_nodes)]
    submitted = cli("sweep", str(main), "--workdir", str(workdir), "--no-wait", "--allow-unmatched")
    assert submitted.returncode == 0, submitted.stdout + submitted.stderr
    two_node_problem = multi_node_problem(2)
    if two_node_problem is None:
        # rank 1's raylet starts beside the first sweep's verl runs on 2 cores: room beyond the 120 s default
        submitted = cli("sweep", str(two_nodes), "--workdir", str(workdir), "--no-wait",
                        env={**os.environ, "CANCELCTL_RAY_JOIN_TIMEOUT_S": "300"})
        assert submitted.returncode == 0, submitted.stdout + submitted.stderr
    yield workdir, names[0], names[1], two_node_problem
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


def task_runner(job_id: str) -> int | None:
    """pid of verl's TaskRunner actor in SLURM task `job_id` (Ray titles it `ray::TaskRunner...`): where
    main_ppo's training loop runs, so freezing it stops the run without killing anything."""
    for pid in job_processes(job_id):
        try:
            if (Path("/proc") / str(pid) / "cmdline").read_bytes().startswith(b"ray::TaskRunner"):
                return pid
        except OSError:
            continue
    return None


def states(workdir: Path, sweep: str) -> dict[str, object]:
    return {s.name.split("-s0")[0]: s for s in sweep_status(workdir, sweep)}


def logged_metrics(run_dir: Path) -> dict[int, dict]:
    """Training step -> the metrics forwarded for it so far (step 0 is verl's evaluation before training)."""
    path = run_dir / "metrics.jsonl"
    lines = [json.loads(line) for line in path.open()] if path.exists() else []
    return {line["step"]: line["metrics"] for line in lines if line["step"] >= 1}


def ray_leftovers(job_id: str) -> dict[int, list[int]]:
    """rank -> pids of processes still naming that rank's Ray temp dir (raylet, gcs_server, workers)."""
    left = {rank: processes_using(f"/tmp/ray-cc-{job_id}-{rank}") for rank in (0, 1)}
    return {rank: pids for rank, pids in left.items() if pids}


def run_dirs(workdir: Path, sweep: str) -> dict[str, Path]:
    return {d.name.split("-s0__")[0]: d for d in sweep_paths(workdir, sweep).runs_dir.iterdir()}


# first in file order: the two-node run must still be training when it is cancelled; the main sweep
# goes on meanwhile
def test_one_verl_run_over_the_two_nodes_of_partition_multi_trains_until_cancelled_leaving_nothing(tmp_path, launched):
    """Ray head + worker on n1/n2, verl joining it with trainer.nnodes=2: data-parallel world size 2,
    one CPU training rank per node, GSPO with δ and TIS (its mechanism metrics logged, the weight sync
    exact); two steps or more (until a group's weights varied), then `cancelctl cancel` ends verl and Ray on
    both nodes."""
    workdir, _, sweep, problem = launched
    if problem is not None:
        pytest.skip(problem)
    run_dir = wait_until(lambda: next(sweep_paths(workdir, sweep).runs_dir.iterdir(), None), 300, "the run folder")

    def two_steps():
        (state,) = sweep_status(workdir, sweep)
        assert state.active, (state.state, state.reason)  # a failed run fails the test now
        # and a step whose GSPO weights varied in a group (checked below): a group of mixed rewards, which the
        # tiny random policy does not always draw (CI once drew none in two steps); the budget is 40 steps
        steps = logged_metrics(run_dir)
        return len(steps) >= 2 and any(m.get("dfpo/weight_dispersion", 0) > 0 for m in steps.values()) and state

    state = wait_until(two_steps, 1200, "2 steps of the two-node run, one with a group of mixed rewards", poll_s=2)
    job = state.job_id
    assert job_processes(job)
    cancelled = cli("cancel", sweep, "--workdir", str(workdir))
    assert cancelled.returncode == 0, cancelled.stdout + cancelled.stderr
    # nothing of the job is left on either node: no verl driver, Ray GCS, raylet or worker
    wait_until(lambda: not job_processes(job) and not ray_leftovers(job.split("_")[0]), 60,
               f"every process of job {job} to end")
    (state,) = sweep_status(workdir, sweep)
    assert state.state == "cancelled", state.reason
    job_id = job.split("_")[0]
    # (Ray's session dirs under /tmp/ray-cc-<job>-<rank> may stay: scancel SIGKILLs the job after the
    # CI cluster's KillWait of 2 s, before Ray's shutdown removes them; a monitor stop removes them)
    acct = subprocess.run(["sacct", "-n", "-P", "-j", job_id, "-o", "JobID,State,NodeList"], check=False,
                          capture_output=True, text=True, timeout=30).stdout
    assert f"{job_id}_0|CANCELLED" in acct and "n[1-2]" in acct, acct

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
    history = {key: {m.step: m.value for m in client.get_metric_history(run.info.run_id, key)} for key in (
        "critic/score/mean", "actor/grad_norm", "training/rollout_probs_diff_mean", "mismatch/rho_std", "hacking/J",
        "dfpo/weight_dispersion")}
    assert all({1, 2} <= set(points) for points in history.values()), history
    assert all(history["actor/grad_norm"][s] > 0 for s in (1, 2))  # both ranks' update ran
    # the weight sync reached the rollout on both nodes: each node's server took every tensor, the
    # initial sync then one per step (version = step + 1), and its log-probs match the actor's recomputation
    syncs = [json.loads(line) for line in (run_dir / "rollout_weights.jsonl").open()]
    by_server = {name: [s for s in syncs if s["server"] == name] for name in {s["server"] for s in syncs}}
    assert len(by_server) == 2, syncs
    for server_syncs in by_server.values():
        assert [s["version"] for s in server_syncs] == [s["global_steps"] + 1 for s in server_syncs], syncs
        assert [s["version"] for s in server_syncs[:3]] == [1, 2, 3], syncs
        assert all(s["missing"] == 0 and s["unexpected"] == 0 for s in server_syncs), syncs
    assert max(history["training/rollout_probs_diff_mean"][s] for s in (1, 2)) < 1e-3, history
    # GSPO's weights (δ on top) vary in a group; the metric averages over live groups (mixed rewards),
    # which a step of the tiny random policy may lack: any logged step will do
    assert max(history["dfpo/weight_dispersion"].values()) > 0, history["dfpo/weight_dispersion"]
    assert run.info.status == "KILLED"  # closed as cancelled, every logged step kept


def test_a_verl_sweep_trains_on_real_main_ppo_under_slurm_requeues_stops_and_reports(tmp_path, launched):
    workdir, sweep, _, _ = launched
    t0 = time.monotonic()
    dirs = wait_until(lambda: (d := run_dirs(workdir, sweep)) and len(d) == 3 and d, 120, "the run folders")

    # a stall: reward-balanced's TaskRunner (verl's training loop) frozen once step 3 is logged (after
    # verl's checkpoint of step 2); the watchdog must catch it, save the stacks and requeue the job
    def three_steps_logged():
        run = states(workdir, sweep)[REQUEUED]
        assert run.active or run.state == "completed", run.reason  # a failed run fails the test now
        return len(logged_metrics(dirs[REQUEUED])) >= 3

    wait_until(three_steps_logged, 900, f"3 steps of {REQUEUED}")
    job_id = states(workdir, sweep)[REQUEUED].job_id
    runner = wait_until(lambda: task_runner(job_id), 60, f"verl's TaskRunner in job {job_id}")
    os.kill(runner, signal.SIGSTOP)
    frozen_at = time.time()

    ended = (*TRAINING_ARMS, "bad-reward")
    final = wait_until(lambda: (now := states(workdir, sweep)) and all(not now[a].active for a in ended) and now,
                       1500, "every run to end", poll_s=2)
    took = time.monotonic() - t0

    for arm in TRAINING_ARMS:
        assert final[arm].state == ("stopped" if arm == STOPPED else "completed"), (arm, final[arm].reason)
    history = metric_history(workdir, sweep)  # asserts one point per step and key (the requeue replays step 3)
    for arm in TRAINING_ARMS:
        keys, steps = history[arm], REQUEUED_STEPS if arm == REQUEUED else STEPS
        if arm == STOPPED:  # the rule fired at step 2: verl trains on until the job's stop reaches it
            steps = 2  # (seen: 3-4 steps later beside two other runs), but the run ends at the rule's step
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
        if arm == STOPPED:  # verl may train a step past the last one forwarded before SIGTERM ends it
            assert versions[: steps + 1] == list(range(1, steps + 2)) and len(versions) < STOPPED_BUDGET + 1, versions
    balanced = history["reward-balanced"]
    assert max(balanced["batching/gen_rounds"].values()) > 1
    assert balanced["batching/discarded_rollouts_cum"][REQUEUED_STEPS] > 0
    tokens = balanced["compute/gen_tokens"]  # discarded rollouts count as compute
    assert all(tokens[s] >= balanced["batching/gen_tokens"][s] for s in tokens)

    # stopped: the rule's step and the checkpoint it leaves
    stop = json.loads((dirs[STOPPED] / "stopped.json").read_text())
    assert stop["step"] == 2 and any((dirs[STOPPED] / "checkpoints").glob("global_step_*")), stop

    # requeued: verl resumed from its own checkpoint (not from step 1), in a second attempt whose
    # weight versions go on from there — and cancelctl's reward-balanced sampler with it: the
    # discarded count goes on from the checkpoint (never restarts at 0); MLflow holds steps 1..8
    # once each (asserted above)
    (stall,) = [a for a in read_attempts(dirs[REQUEUED]) if a.get("outcome") == "stalled"]
    caught_s = stall["ts"] - frozen_at
    assert stall["requeue"] and caught_s <= 60 * STALL_AFTER_MIN + 30, (caught_s, stall)  # a poll and the dump
    stacks = (dirs[REQUEUED] / stall["stacks"]).read_text()
    assert f"=== process {runner}:" in stacks, stacks[:2000]  # the frozen TaskRunner's stack (py-spy) or /proc
    assert final[REQUEUED].stalls == 1
    second_attempt = [json.loads(line)["step"] for line in (dirs[REQUEUED] / "verl_metrics.jsonl").open()]
    assert min(second_attempt) > 1, second_attempt
    assert [a["event"] for a in read_attempts(dirs[REQUEUED])].count("start") == 2
    syncs = [json.loads(line) for line in (dirs[REQUEUED] / "rollout_weights.jsonl").open()]
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
    discarded = [balanced["batching/discarded_rollouts_cum"][s] for s in range(1, REQUEUED_STEPS + 1)]
    assert discarded == sorted(discarded), discarded

    # a worker's exception names itself in status and error.txt, not verl's generic trainer error
    assert final["bad-reward"].state == "failed"
    assert "ValueError: reward broke on purpose" in final["bad-reward"].reason, final["bad-reward"].reason
    kind, line = read_error(dirs["bad-reward"])
    assert kind == "FAILED" and "ValueError: reward broke on purpose" in line, line

    report_dir = tmp_path / "report"
    report = cli("report", sweep, "--workdir", str(workdir), "--out", str(report_dir), "--baseline", REQUEUED,
                 "--allow-unmatched")
    assert report.returncode == 0, report.stdout + report.stderr
    assert "1 run(s) left out" in report.stdout + report.stderr  # the failed run
    assert "stopped by a monitor rule are left out" in report.stdout + report.stderr  # grpo, unless --include-stopped
    tables = report_dir / "tables"
    finals = json.loads((tables / "final_scores.json").read_text())["rows"]
    assert {row["arm"] for row in finals} == set(TRAINING_ARMS) - {STOPPED}  # verl's validation, avg@1 on the tiny val set
    mechanisms = json.loads((tables / "mechanisms.json").read_text())["rows"]
    assert {row["arm"] for row in mechanisms} == set(TRAINING_ARMS) - {STOPPED}
    mechanism = (report_dir / "report.md").read_text()
    for key in ("mismatch/rho_std", "hacking/J", "dfpo/weight_dispersion"):
        assert key in mechanism, key
    (requeue_s,) = stall_to_requeue_s(dirs[REQUEUED])
    record_figure(f"verl e2e sweep: 3 runs (one stalled and requeued, one stopped, one failed), every run ended in {took:.0f} s; "
          f"verl's TaskRunner frozen after step 3, caught after {caught_s:.1f} s (limit {60 * STALL_AFTER_MIN:.0f} s), "
          f"stall -> requeued attempt started: {requeue_s:.1f} s")
