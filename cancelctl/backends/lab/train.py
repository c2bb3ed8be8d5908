"""The lab's RLVR loop, top to bottom: rollouts → θ_old log-probs → group advantages → batching →
ppo_epochs × mini-batches of any `losses/` loss → metrics → eval → checkpoint.

Randomness is drawn from generators seeded by (seed, step, stream), never from a stream that runs
across steps, so a run resumed from a checkpoint replays exactly what an uninterrupted run does;
the checkpoint holds model, optimizer, counters and the reward-balanced buffer.

Length: the RLVR loop is kept top to bottom in one file on purpose (cleanrl style), so a reader sees
rollout → advantages → batching → update → metrics → checkpoint in order.
"""

from __future__ import annotations

import copy
import hashlib
import inspect
import math
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import torch

import losses
from cancelctl.backends.lab import checkpoint, warmstart
from cancelctl.backends.lab.batching import RewardBalancedBuffer, holds_whole_groups, minibatches
from cancelctl.spec.batching import minibatch_order
from cancelctl.spec.metric_keys import REWARD_KEY
from cancelctl.backends.lab.metrics import (
    STEP_KEYS,
    LogOddsProbe,
    bucket_energy,
    eval_metrics,
    frequency_buckets,
    mean_over_passes,
    mismatch,
    template_boost,
    token_flips,
)
from cancelctl.backends.lab.objective import build_loss, loss_config, needs_groups, row_weights
from cancelctl.backends.lab.policy import PolicyConfig, TinyCausalLM, response_forward, token_entropy
from cancelctl.backends.lab.rollout import InferenceEngine, RolloutBatch, generate
from cancelctl.backends.lab.task import VOCAB, ArithmeticTask
from cancelctl.backends.lab.step_cost import step_pause
from cancelctl.jobs import preemption
from cancelctl.jobs.heartbeat import beat
from cancelctl.jobs.monitor import RunMonitor, lr_spike
from cancelctl.spec.experiment import AlgorithmSpec, ExperimentSpec
from cancelctl.spec.run import RunSpec
from cancelctl.workdir import RunFolder
from losses.metrics import MONITOR_P_LOW, dfpo_weight_dispersion

if TYPE_CHECKING:
    from cancelctl.tracking.logger import MetricLogger

LOGODDS_PROBES = 16  # eval prompts whose digits-vs-words log-odds is tracked [D App. A.3]


def stream_seed(seed: int, step: int, stream: str, index: int = 0) -> int:
    """A 63-bit seed per (run seed, step, purpose[, round]): independent, replayable streams."""
    digest = hashlib.blake2b(f"{seed}/{step}/{stream}/{index}".encode(), digest_size=8).digest()
    return int.from_bytes(digest, "little") & ((1 << 63) - 1)


def generator(seed: int, step: int, stream: str, index: int = 0) -> torch.Generator:
    return torch.Generator().manual_seed(stream_seed(seed, step, stream, index))


@dataclass
class FirstEpoch:
    """What the first epoch's passes leave per row: output-layer gradient energy per token, and
    the weight w_i the loss applied to the row (each row is updated once per epoch)."""

    energy: torch.Tensor  # [N, T] float64
    weights: torch.Tensor  # [N]


@dataclass
class Progress:
    """Counters carried across steps (and checkpoints)."""

    step: int = 0
    gen_tokens_cum: int = 0
    update_steps_cum: int = 0
    hours_cum: float = 0.0
    discarded_cum: int = 0
    next_group_id: int = 0
    last_metrics: dict[str, float] = field(default_factory=dict)


def make_optimizer(algorithm: AlgorithmSpec, params) -> torch.optim.Optimizer:
    if algorithm.optimizer == "adamw":
        return torch.optim.AdamW(params, lr=algorithm.lr, weight_decay=algorithm.weight_decay)
    if algorithm.optimizer == "adam":
        return torch.optim.Adam(params, lr=algorithm.lr, weight_decay=algorithm.weight_decay)
    return torch.optim.SGD(params, lr=algorithm.lr, weight_decay=algorithm.weight_decay)


def train(run: RunSpec, run_dir: Path, logger: MetricLogger, cache_dir: Path) -> dict[str, float]:
    """Train one lab run; log every step's metrics; return the final step's metrics.

    Resumes from `run_dir/checkpoint.pt` when present. Single-threaded torch (so runs side by side
    do not fight over cores) and deterministic algorithms, restored on return.
    """
    threads, deterministic = torch.get_num_threads(), torch.are_deterministic_algorithms_enabled()
    torch.set_num_threads(1)
    torch.use_deterministic_algorithms(True)
    try:
        return LabRun(run.spec, Path(run_dir), logger, Path(cache_dir)).run()
    finally:
        torch.set_num_threads(threads)
        torch.use_deterministic_algorithms(deterministic)


class LabRun:
    def __init__(self, spec: ExperimentSpec, run_dir: Path, logger: MetricLogger, cache_dir: Path) -> None:
        self.spec, self.run_dir, self.logger = spec, run_dir, logger
        run_dir.mkdir(parents=True, exist_ok=True)
        lab, alg = spec.lab, spec.algorithm
        self.G, self.P = spec.rollout.G, spec.budget.prompts_per_step
        self.max_new_tokens = spec.max_new_tokens  # already capped at lab.max_response_tokens
        self.task = ArithmeticTask(lab.max_operand, spec.seed)
        policy = PolicyConfig(
            vocab_size=len(VOCAB),
            max_len=self.task.max_prompt_len + lab.max_response_tokens,
            d_model=lab.d_model,
            n_layers=lab.n_layers,
            n_heads=lab.n_heads,
            moe_experts=lab.moe.experts if lab.moe else 0,
            moe_top_k=lab.moe.top_k if lab.moe else 0,
        )
        warm = warmstart.WarmStartConfig(steps=lab.warmstart_steps, noise=lab.warmstart_noise, seed=spec.seed)
        self.model: TinyCausalLM = warmstart.load_or_train(self.task, policy, warm, cache_dir)
        self.engine = InferenceEngine(self.model, spec.rollout.precision, spec.rollout.logit_mantissa_bits)
        self.reference = copy.deepcopy(self.model).requires_grad_(False) if alg.kl_coef > 0 else None
        self.optimizer = make_optimizer(alg, self.model.parameters())
        self.noise_generator = torch.Generator()  # re-seeded every step (inject_noise [H eq. 21])
        self.loss_fn = build_loss(alg, self.noise_generator)
        self.loss_takes_rollout_log_prob = "rollout_log_prob" in inspect.signature(self.loss_fn).parameters
        self.config = loss_config(alg, self.G)
        self.eval_problems = self.task.eval_set(spec.eval.prompts)
        self.probe = LogOddsProbe(self.task, self.task.eval_set(LOGODDS_PROBES))
        self.buffer = (
            RewardBalancedBuffer(self.P, spec.batching.min_frac, capacity=self.P)
            if spec.batching.strategy == "reward_balanced"
            else None
        )
        self.progress = Progress()
        self.logodds_start = self.probe.logodds(self.model)

    # ------------------------------------------------------------------ main loop

    def run(self) -> dict[str, float]:
        spec = self.spec
        if spec.lab.fail_at_step == 0:
            raise RuntimeError("lab.fail_at_step=0: injected failure (executor tests)")
        resumed = self.resume()
        # steps an earlier attempt logged after its last checkpoint (it failed before the next one,
        # e.g. on a full disk), or before its first (killed or requeued early: this attempt starts
        # over), are replayed identically: logged once, not twice
        logged_through = RunFolder(self.run_dir).last_step()
        if not resumed:
            # the warm start's accuracy, before any update: evaluated on a replay too (it draws from
            # the run's generators), logged once
            initial = self.evaluate(0)
            if logged_through is None:
                self.logger.log(0, initial)
        monitor, spike = RunMonitor(spec.monitor, self.run_dir, resume_step=self.progress.step), lr_spike()
        pause = step_pause()
        step = self.progress.step
        while not self.budget_reached(step):  # a run resumed from its last step's checkpoint is done
            step += 1
            if spec.lab.fail_at_step == step:
                raise RuntimeError(f"lab.fail_at_step={step}: injected failure (executor tests)")
            if spike is not None and spike[0] == step:  # test support: diverge on purpose (monitor.LR_SPIKE_ENV)
                for group in self.optimizer.param_groups:
                    group["lr"] *= spike[1]
            started = time.perf_counter()
            metrics = self.train_step(step)
            last = self.budget_reached(step)  # the final eval and checkpoint are at the step reaching it
            if step % spec.eval.every == 0 or last:
                metrics.update(self.evaluate(step))
            self.progress.hours_cum += (time.perf_counter() - started) / 3600
            metrics["compute/hours_cum"] = self.progress.hours_cum
            diverged = {k: v for k, v in metrics.items() if not math.isfinite(v)}
            if diverged:  # logging them as numbers would hide the blow-up from every report downstream
                raise FloatingPointError(
                    f"lab step {step}: non-finite metrics {diverged}: training diverged "
                    f"(algorithm.lr={spec.algorithm.lr:g}, grad_clip={spec.algorithm.grad_clip:g})"
                )
            missing = set(STEP_KEYS) - set(metrics)
            if missing:  # a backend that silently drops a metric key (docs/metrics.md) breaks every report downstream
                raise RuntimeError(f"lab step {step} lacks metric keys {sorted(missing)}")
            self.progress.step, self.progress.last_metrics = step, metrics
            if logged_through is None or step > logged_through:
                self.logger.log(step, metrics)
            beat(self.run_dir, step=step)  # a replayed step is progress too (the stall watchdog)
            stop = monitor.observe(step, metrics)  # alerts.jsonl; a `stop` rule writes stopped.json
            if stop is not None or step % spec.lab.checkpoint_every == 0 or last:
                self.save()
            if stop is not None:  # ends at this step boundary, its checkpoint kept
                break
            if pause:
                time.sleep(pause)
            # requeue/timeout signal, or too little of the allocation left: save, then hand over
            preemption.at_step_boundary(self.save, step_s=time.perf_counter() - started)
        return dict(self.progress.last_metrics)

    def budget_reached(self, step: int) -> bool:
        """Whether the run is done after `step`: its step budget, or the first step whose cumulative
        compute reaches a compute budget. That step's tokens (every rollout of it, discarded ones
        included) all count, so a token budget is overshot by less than one step's tokens: at most
        balance_max_rounds × prompts × G × max_new_tokens (reward_balanced), else one round's."""
        budget = self.spec.budget
        if budget.gen_tokens is not None:
            return self.progress.gen_tokens_cum >= budget.gen_tokens
        if budget.update_steps is not None:
            return self.progress.update_steps_cum >= budget.update_steps
        return step >= budget.steps

    def train_step(self, step: int) -> dict[str, float]:
        spec, alg = self.spec, self.spec.algorithm
        temperature = spec.rollout.temperature

        # 1. rollouts (G per prompt, in the rollout precision) → the update batch
        batch, metrics = self.collect(step)
        mask = batch.response_mask
        adv = batch.advantages

        # 2. θ_old log-probs, recomputed by the trainer in fp32
        with torch.no_grad():
            old = response_forward(self.model, batch.ids, batch.valid, batch.prompt_len, temperature)
            old_log_prob = old.log_prob * mask
            entropy = token_entropy(old.logits.float() / temperature)
            ref_log_prob = None
            if self.reference is not None:
                ref_log_prob = response_forward(
                    self.reference, batch.ids, batch.valid, batch.prompt_len, temperature
                ).log_prob

        # 3. ppo_epochs × mini-batches
        rows_per_minibatch = spec.mini_batch_prompts * self.G
        shuffle = generator(spec.seed, step, "shuffle")
        self.noise_generator.manual_seed(stream_seed(spec.seed, step, "inject_noise"))
        record = FirstEpoch(energy=torch.zeros_like(mask, dtype=torch.float64), weights=torch.ones(batch.size))
        passes: list[dict[str, float]] = []
        for epoch in range(alg.ppo_epochs):
            for rows in minibatches(minibatch_order(spec), adv, batch.group_ids, rows_per_minibatch, shuffle):
                passes.append(self.update(batch, rows, old_log_prob, ref_log_prob, record if epoch == 0 else None))
        self.progress.update_steps_cum += len(passes)

        # 4. what the step's update did
        with torch.no_grad():
            new_log_prob = (
                response_forward(self.model, batch.ids, batch.valid, batch.prompt_len, temperature).log_prob * mask
            )
        metrics.update(mean_over_passes(passes))
        # [D eq. 23] over whole groups, each row with the weight its own pass gave it
        metrics["dfpo/asym"] = losses.dfpo_asym(record.weights, adv, batch.group_ids)
        metrics["dfpo/weight_dispersion"] = dfpo_weight_dispersion(record.weights, adv, batch.group_ids)
        if not needs_groups(alg):  # DFPO reports the residual of each transform itself (≈ 0)
            metrics["dfpo/ortho_residual"] = losses.dfpo_ortho_residual(record.weights, adv, batch.group_ids)
        metrics["actor/entropy"] = float((entropy * mask).sum() / mask.sum().clamp(min=1))
        metrics.update(mismatch(old_log_prob, batch.rollout_log_prob, mask))
        metrics["hacking/J"] = losses.hacking_j(adv, old_log_prob, mask, delta=alg.monitor_delta, p_low=MONITOR_P_LOW)
        buckets = frequency_buckets(batch.responses, mask, len(VOCAB))
        metrics.update(bucket_energy(record.energy, buckets, mask))
        metrics.update(token_flips(old_log_prob, new_log_prob, adv, mask))
        metrics.update(template_boost(batch.responses, old_log_prob, new_log_prob, mask))  # [C §3.2]
        metrics["lab/logodds_drift"] = float((self.probe.logodds(self.model) - self.logodds_start).abs().mean())
        metrics["compute/gen_tokens_cum"] = float(self.progress.gen_tokens_cum)
        metrics["compute/update_steps_cum"] = float(self.progress.update_steps_cum)
        return metrics

    # ------------------------------------------------------------------ rollouts

    def rollout(self, step: int, round_index: int) -> RolloutBatch:
        spec = self.spec
        problems = self.task.sample_train(self.P, generator(spec.seed, step, "prompts", round_index))
        batch = generate(
            self.engine,
            self.task,
            problems,
            self.G,
            max_new_tokens=self.max_new_tokens,
            temperature=spec.rollout.temperature,
            top_p=spec.rollout.top_p,
            generator=generator(spec.seed, step, "rollout", round_index),
            first_group_id=self.progress.next_group_id,
        )
        self.progress.next_group_id += len(problems)
        batch.advantages = losses.group_advantages(batch.rewards, batch.group_ids)  # [D eq. 43]
        return batch

    def collect(self, step: int) -> tuple[RolloutBatch, dict[str, float]]:
        """The update batch, and the generation metrics (over every rollout generated this step)."""
        generated: list[RolloutBatch] = []
        discarded = 0
        if self.buffer is None:
            batch = self.rollout(step, 0)
            generated.append(batch)
            balanced = True
        else:  # reward_balanced: generate until a balanced batch can be chosen [C §4]
            for round_index in range(self.spec.lab.balance_max_rounds):
                generated.append(self.rollout(step, round_index))
                self.buffer.add(generated[-1])
                chosen, balanced = self.buffer.choose()
                if balanced:
                    break
            batch, discarded = self.buffer.take(chosen)
        rewards = torch.cat([b.rewards for b in generated])
        lengths = torch.cat([b.response_mask.sum(-1) for b in generated])
        gen_tokens = int(lengths.sum())
        self.progress.gen_tokens_cum += gen_tokens
        self.progress.discarded_cum += discarded
        n = batch.size
        return batch, {
            REWARD_KEY: float(rewards.mean()),
            "response_length/mean": float(lengths.mean()),
            "compute/gen_tokens": float(gen_tokens),
            "batching/generated_rollouts": float(len(rewards)),
            "batching/gen_rounds": float(len(generated)),
            "batching/discarded_rollouts": float(discarded),
            "batching/discarded_rollouts_cum": float(self.progress.discarded_cum),
            "batching/balanced": float(balanced),
            "batching/pos_frac": float((batch.advantages > 0).sum()) / n,
            "batching/neg_frac": float((batch.advantages < 0).sum()) / n,
            "batching/update_score_mean": float(batch.rewards.mean()),
        }

    # ------------------------------------------------------------------ one optimizer step

    def update(
        self,
        batch: RolloutBatch,
        rows: torch.Tensor,
        old_log_prob: torch.Tensor,
        ref_log_prob: torch.Tensor | None,
        record: FirstEpoch | None,
    ) -> dict[str, float]:
        """One optimizer step on the mini-batch `rows`; returns this pass's loss metrics.

        DFPO needs whole groups (docs/losses.md#dfpo, step 5). When the strategy splits groups across
        mini-batches, the pass runs on the whole batch so s̃ (stop-grad) is computed over whole
        groups at the current θ, and a 0/1 row weight restricts the gradient to the mini-batch;
        the aggregation denominators are the mini-batch's (global_batch_info). The loss's own
        clip/kl metrics then describe the whole batch at this θ.
        """
        spec, alg = self.spec, self.spec.algorithm
        whole = not needs_groups(alg) or holds_whole_groups(rows, batch.group_ids)
        fwd = rows if whole else torch.arange(batch.size)
        in_minibatch = torch.isin(fwd, rows).float()
        mask = batch.response_mask[fwd]
        out = response_forward(self.model, batch.ids[fwd], batch.valid[fwd], batch.prompt_len, spec.rollout.temperature)
        out.logits.retain_grad()
        log_prob = out.log_prob * mask
        self.config.global_batch_info = (
            {} if whole else {"global_batch_size": len(rows), "batch_num_tokens": batch.response_mask[rows].sum()}
        )
        kwargs: dict[str, Any] = dict(
            old_log_prob=old_log_prob[fwd],
            log_prob=log_prob,
            advantages=batch.advantages[fwd],
            response_mask=mask,
            loss_agg_mode=alg.agg_mode,
            config=self.config,
            rollout_is_weights=None if whole else in_minibatch.unsqueeze(-1).expand_as(mask),
            group_ids=batch.group_ids[fwd],
        )
        if self.loss_takes_rollout_log_prob:
            kwargs["rollout_log_prob"] = batch.rollout_log_prob[fwd]
        pg_loss, pg_metrics = self.loss_fn(**kwargs)

        own_mask = mask * in_minibatch.unsqueeze(-1)
        entropy = losses.agg_loss(token_entropy(out.logits.float() / spec.rollout.temperature), own_mask, alg.agg_mode)
        loss = pg_loss - alg.entropy_coef * entropy
        metrics = {"actor/pg_loss": float(pg_loss.detach()), **pg_metrics}
        if ref_log_prob is not None:  # k3 estimator of KL(π_θ ‖ π_ref), as verl's low_var_kl
            delta = (ref_log_prob[fwd] - out.log_prob).clamp(-20, 20)
            kl = losses.agg_loss(torch.exp(delta) - delta - 1, own_mask, alg.agg_mode)
            loss = loss + alg.kl_coef * kl
            metrics["actor/kl_loss"] = float(kl.detach())

        self.optimizer.zero_grad(set_to_none=True)
        loss.backward()
        grad_norm = torch.nn.utils.clip_grad_norm_(self.model.parameters(), alg.grad_clip)
        self.optimizer.step()
        metrics["actor/grad_norm"] = float(grad_norm)

        if record is not None:
            # ‖∂loss/∂W_out per token‖² = ‖g_t‖² ‖h_t‖² [D eq. 24, C eq. 6-7]
            g2 = out.logits.grad.double().pow(2).sum(-1)
            h2 = out.hidden.detach().double().pow(2).sum(-1)
            record.energy.index_add_(0, fwd, g2 * h2 * mask)
            # w_i the loss applied to this pass's rows [D eq. 23]
            weights = row_weights(
                alg, self.config, log_prob.detach(), kwargs["old_log_prob"], kwargs["advantages"], mask,
                kwargs["group_ids"],
            )
            own = in_minibatch.bool()
            record.weights[fwd[own]] = weights[own].float()
        for key in ("dfpo/asym", "dfpo/weight_dispersion"):  # the loss's own are over this pass's groups;
            metrics.pop(key, None)  # the step's are over all
        return metrics

    # ------------------------------------------------------------------ eval, checkpoint

    @torch.no_grad()
    def evaluate(self, step: int) -> dict[str, float]:
        """avg@k accuracy and pass@k on the held-out prompts, sampled like rollouts (own generator per step)."""
        k = self.spec.eval.k
        batch = generate(
            self.engine,
            self.task,
            self.eval_problems,
            k,
            max_new_tokens=self.max_new_tokens,
            temperature=self.spec.rollout.temperature,
            top_p=self.spec.rollout.top_p,
            generator=generator(self.spec.seed, step, "eval"),
        )
        return eval_metrics(batch.rewards, k)  # avg@k and pass@1, 2, 4, … k [Chen et al. 2021]

    def save(self) -> None:
        # metrics.jsonl already holds every point up to here (the resume's truth); MLflow takes them
        # if it is free now. Waiting on a store busy with the sweep's other runs would stall every
        # checkpoint, and with it a SIGTERM's checkpoint past the scheduler's kill wait.
        self.logger.flush(wait=False)
        started = time.perf_counter()
        checkpoint.save(
            self.run_dir,
            {
                "model": self.model.state_dict(),
                "optimizer": self.optimizer.state_dict(),
                "progress": asdict(self.progress),
                "logodds_start": self.logodds_start,
                "buffer": None if self.buffer is None else self.buffer.state_dict(),
                "torch_rng": torch.get_rng_state(),
            },
        )
        preemption.checkpoint_took(time.perf_counter() - started)  # what leaving before the time limit needs

    def resume(self) -> bool:
        state = checkpoint.load(self.run_dir)
        if state is None:
            return False
        self.model.load_state_dict(state["model"])
        self.optimizer.load_state_dict(state["optimizer"])
        self.progress = Progress(**state["progress"])
        self.logodds_start = state["logodds_start"]
        if self.buffer is not None and state["buffer"] is not None:
            self.buffer.load_state_dict(state["buffer"])
        torch.set_rng_state(state["torch_rng"])
        return True
