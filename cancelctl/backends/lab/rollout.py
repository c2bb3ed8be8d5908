"""Rollouts: G samples per prompt, all prompts × G in one batch, in the rollout's own precision.

The "inference engine" is a copy of the policy in the rollout precision: `bf16` / `fp16` cast the
weights (as vLLM serves bf16 weights) and record the log-probs of the tokens they sample, so
π_infer ≠ π_train and ρ = π_train/π_infer [H eq. 5] is a real, measurable mismatch. With
`logit_bits` the copy also rounds its logits (vocabulary and MoE router) to that many mantissa
bits, a controllable extra mismatch that costs no slow low-precision CPU kernels at fp32. `fp32`
without rounding is the trainer itself: its rollout log-probs come from the trainer's own forward
over the finished batch, the very computation that later gives old_log_prob, so the mismatch is 0.

Log-probs are those of the temperature-scaled distribution before top-p truncation, the one the
trainer recomputes (top-p only narrows what is sampled). Sampling uses a KV
cache and stops when every row has emitted <eos>, so responses are as long as the longest one.
"""

from __future__ import annotations

import copy
from dataclasses import dataclass, field

import torch

from cancelctl.backends.lab.policy import KVCache, MoEFeedForward, TinyCausalLM, response_forward, round_mantissa
from cancelctl.backends.lab.task import EOS_ID, PAD_ID, ArithmeticTask, Problem

PRECISIONS = {"fp32": torch.float32, "bf16": torch.bfloat16, "fp16": torch.float16}


@dataclass
class RolloutBatch:
    """N = groups × G response rows. Columns [0, prompt_len) hold the left-padded prompt."""

    ids: torch.Tensor  # [N, prompt_len + T] long
    valid: torch.Tensor  # [N, prompt_len + T] bool (not padding)
    prompt_len: int
    response_mask: torch.Tensor  # [N, T] float: generated tokens up to and including <eos>
    rollout_log_prob: torch.Tensor  # [N, T] log π_infer of the sampled tokens (0 on padding)
    group_ids: torch.Tensor  # [N] long, one id per prompt instance (verl's uid)
    rewards: torch.Tensor  # [N] float 0/1 from the checker
    problems: list[Problem] = field(default_factory=list)  # one per row
    advantages: torch.Tensor | None = None  # [N], filled by the trainer per group [D eq. 43]

    @property
    def size(self) -> int:
        return int(self.ids.shape[0])

    @property
    def responses(self) -> torch.Tensor:
        return self.ids[:, self.prompt_len :]

    def select(self, rows: torch.Tensor | list[int]) -> RolloutBatch:
        rows = torch.as_tensor(rows, dtype=torch.long)
        return RolloutBatch(
            ids=self.ids[rows],
            valid=self.valid[rows],
            prompt_len=self.prompt_len,
            response_mask=self.response_mask[rows],
            rollout_log_prob=self.rollout_log_prob[rows],
            group_ids=self.group_ids[rows],
            rewards=self.rewards[rows],
            problems=[self.problems[i] for i in rows.tolist()],
            advantages=None if self.advantages is None else self.advantages[rows],
        )

    def padded_to(self, T: int) -> RolloutBatch:
        """The same rows with responses right-padded to T columns."""
        extra = T - self.response_mask.shape[1]
        if extra <= 0:
            return self
        pad = lambda x, value: torch.nn.functional.pad(x, (0, extra), value=value)  # noqa: E731
        return RolloutBatch(
            ids=pad(self.ids, PAD_ID),
            valid=pad(self.valid, False),
            prompt_len=self.prompt_len,
            response_mask=pad(self.response_mask, 0.0),
            rollout_log_prob=pad(self.rollout_log_prob, 0.0),
            group_ids=self.group_ids,
            rewards=self.rewards,
            problems=self.problems,
            advantages=self.advantages,
        )

    @staticmethod
    def concat(batches: list[RolloutBatch]) -> RolloutBatch:
        T = max(b.response_mask.shape[1] for b in batches)
        batches = [b.padded_to(T) for b in batches]
        first = batches[0]
        cat = lambda name: torch.cat([getattr(b, name) for b in batches])  # noqa: E731
        return RolloutBatch(
            ids=cat("ids"),
            valid=cat("valid"),
            prompt_len=first.prompt_len,
            response_mask=cat("response_mask"),
            rollout_log_prob=cat("rollout_log_prob"),
            group_ids=cat("group_ids"),
            rewards=cat("rewards"),
            problems=[p for b in batches for p in b.problems],
            advantages=None if any(b.advantages is None for b in batches) else cat("advantages"),
        )


class InferenceEngine:
    """The model that samples. `fp32` without `logit_bits`: the trainer itself. Otherwise a copy in the
    precision (rounding its logits to `logit_bits` mantissa bits when set) whose weights are re-synced
    from the trainer before every generation (as verl syncs weights into vLLM)."""

    def __init__(self, model: TinyCausalLM, precision: str, logit_bits: int | None = None) -> None:
        self.trainer, self.precision, self.logit_bits = model, precision, logit_bits
        if self.is_trainer:
            self.model = model
            return
        self.model = copy.deepcopy(model).to(PRECISIONS[precision]).requires_grad_(False)
        for module in self.model.modules():
            if isinstance(module, MoEFeedForward):
                module.round_bits = logit_bits

    @property
    def is_trainer(self) -> bool:
        return self.precision == "fp32" and self.logit_bits is None

    def logits(self, logits: torch.Tensor) -> torch.Tensor:
        """The copy's next-token logits as fp32, after its simulated rounding."""
        return logits.float() if self.logit_bits is None else round_mantissa(logits, self.logit_bits)

    @torch.no_grad()
    def sync(self) -> TinyCausalLM:
        if self.model is not self.trainer:
            for mine, theirs in zip(self.model.parameters(), self.trainer.parameters(), strict=True):
                mine.copy_(theirs)
        return self.model


def top_p_filter(probs: torch.Tensor, top_p: float) -> torch.Tensor:
    """Nucleus sampling: keep the smallest set of tokens whose mass reaches top_p (renormalised)."""
    if top_p >= 1.0:
        return probs
    sorted_probs, order = probs.sort(dim=-1, descending=True)
    mass_before = sorted_probs.cumsum(-1) - sorted_probs
    sorted_probs = torch.where(mass_before < top_p, sorted_probs, 0.0)
    kept = torch.zeros_like(probs).scatter(-1, order, sorted_probs)
    return kept / kept.sum(-1, keepdim=True)


def prompt_block(task: ArithmeticTask, problems: list[Problem], width: int) -> torch.Tensor:
    """[n, width] left-padded prompt ids."""
    out = torch.full((len(problems), width), PAD_ID, dtype=torch.long)
    for i, p in enumerate(problems):
        ids = task.prompt_ids(p)
        out[i, width - len(ids) :] = torch.tensor(ids)
    return out


@torch.no_grad()
def generate(
    engine: InferenceEngine,
    task: ArithmeticTask,
    problems: list[Problem],
    G: int,
    *,
    max_new_tokens: int,
    temperature: float,
    top_p: float,
    generator: torch.Generator,
    first_group_id: int = 0,
) -> RolloutBatch:
    """Sample G responses for each problem (rows of one problem are adjacent and share a group id)."""
    sampler = engine.sync()
    rows = [p for p in problems for _ in range(G)]
    P, N = task.max_prompt_len, len(rows)
    # one prompt pass per problem, its keys and last logits shared by the G rows of its group
    # (row-wise the same numbers as a pass over all N rows, at 1/G of the cost)
    unique = prompt_block(task, problems, P)
    unique_valid = unique != PAD_ID
    caches = [KVCache() for _ in sampler.blocks]
    logits = sampler.decode_step(unique, (unique_valid.long().cumsum(-1) - 1).clamp(min=0), unique_valid, caches)
    logits = logits[:, -1:].repeat_interleave(G, dim=0)
    for cache in caches:
        cache.repeat_rows(G)
    prompt, prompt_valid = unique.repeat_interleave(G, dim=0), unique_valid.repeat_interleave(G, dim=0)
    next_pos = prompt_valid.sum(-1, keepdim=True)
    key_valid = prompt_valid
    tokens, log_probs, alive = [], [], []
    done = torch.zeros(N, dtype=torch.bool)
    for t in range(max_new_tokens):
        logp = torch.log_softmax(engine.logits(logits[:, -1]) / temperature, dim=-1)
        token = torch.multinomial(top_p_filter(logp.exp(), top_p), 1, generator=generator).squeeze(-1)
        token = torch.where(done, PAD_ID, token)
        tokens.append(token)
        alive.append(~done)
        log_probs.append(torch.where(done, 0.0, logp.gather(-1, token.unsqueeze(-1)).squeeze(-1)))
        done = done | (token == EOS_ID)
        if bool(done.all()) or t == max_new_tokens - 1:
            break
        key_valid = torch.cat([key_valid, alive[-1].unsqueeze(-1)], dim=1)
        logits = sampler.decode_step(token.unsqueeze(-1), next_pos + t, key_valid, caches)
    responses = torch.stack(tokens, dim=1)
    response_mask = torch.stack(alive, dim=1).float()
    ids = torch.cat([prompt, responses], dim=1)
    valid = torch.cat([prompt_valid, response_mask.bool()], dim=1)
    rewards = torch.tensor([task.reward(p, responses[i][response_mask[i].bool()].tolist()) for i, p in enumerate(rows)])
    if engine.is_trainer:  # its log-probs are the trainer's forward, as old_log_prob's
        rollout_log_prob = response_forward(engine.trainer, ids, valid, P, temperature).log_prob * response_mask
    else:  # the copy's own log-probs of what it sampled: π_infer, not a recomputation
        rollout_log_prob = torch.stack(log_probs, dim=1)
    group_ids = torch.arange(len(problems)).repeat_interleave(G) + first_group_id
    return RolloutBatch(
        ids=ids,
        valid=valid,
        prompt_len=P,
        response_mask=response_mask,
        rollout_log_prob=rollout_log_prob,
        group_ids=group_ids,
        rewards=rewards,
        problems=rows,
    )
