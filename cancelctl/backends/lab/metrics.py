"""Mechanism metrics the lab computes exactly (SPEC "Per-step metrics"; small enough to afford).

- `frequency_buckets` / `bucket_energy`: [D eq. 24] Energy(B) = Σ_{t∈B} ‖∇θ ℓ_t‖² / Σ_t ‖∇θ ℓ_t‖²
  with θ the unembedding: for z_t = W h_t the per-token gradient is g_t h_tᵀ (g_t = ∂loss/∂z_t from
  autograd, so clipping, aggregation, wrappers and the entropy bonus are all in it) and its squared
  norm is exactly ‖g_t‖²‖h_t‖² — the output-layer quantity of [C eq. 6-7], computed, not estimated.
- `token_flips`: [C App. C] share of tokens whose log-prob moved against their row's advantage
  sign over one step's update (both log-probs from fp32 trainer forwards on the same batch).
- `logodds`: [D App. A.3] log π(y_a|x) − log π(y_b|x) for two equivalent correct answers.
"""

from __future__ import annotations

import torch

from cancelctl.backends.lab.policy import TinyCausalLM, response_forward
from cancelctl.backends.lab.rollout import prompt_block
from cancelctl.backends.lab.task import PAD_ID, ArithmeticTask, Problem

N_BUCKETS = 4

# Logged at every training step (SPEC "Per-step metrics", verl's names); eval adds `eval_key(k)`.
STEP_KEYS = (
    "critic/score/mean",
    "actor/entropy",
    "response_length/mean",
    "actor/pg_loss",
    "actor/pg_clipfrac",
    "actor/pg_clipfrac_lower",
    "actor/ppo_kl",
    "actor/grad_norm",
    "mismatch/rho_std",
    "mismatch/rho_max",
    "mismatch/pcc",
    "hacking/J",
    "dfpo/asym",
    "dfpo/ortho_residual",
    *(f"cancel/energy_b{k}" for k in range(N_BUCKETS)),
    "cancel/flip_pos",
    "cancel/flip_neg",
    "compute/gen_tokens",
    "compute/gen_tokens_cum",
    "compute/update_steps_cum",
    "compute/hours_cum",
    "lab/logodds_drift",
)


def eval_key(k: int) -> str:
    """avg@k accuracy on the held-out prompts (verl's val-core/<source>/<metric>/mean@k, '@' spelled out)."""
    return f"val-core/lab/acc/mean_at_{k}"


def frequency_buckets(responses: torch.Tensor, response_mask: torch.Tensor, vocab_size: int) -> torch.Tensor:
    """[N, T] bucket 0..3 of every response token by its type's frequency in this batch (3 = most frequent).

    Types are ranked by count (rarest first) and a type goes to the quartile of the batch's token
    occurrences in which its own occurrences end: buckets split the occurrences ~evenly, a type is
    never cut, and the most frequent type is always in bucket 3.
    """
    mask = response_mask.bool()
    counts = torch.bincount(responses[mask], minlength=vocab_size)
    order = torch.argsort(counts, stable=True)
    total = int(counts.sum())
    ends = counts[order].cumsum(0)  # occurrences up to and including each type
    quartile = (N_BUCKETS * ends + max(total, 1) - 1) // max(total, 1) - 1  # ceil(4·end/total) − 1, exact
    bucket_of_type = torch.empty(vocab_size, dtype=torch.long)
    bucket_of_type[order] = quartile.clamp(0, N_BUCKETS - 1)
    return bucket_of_type[responses]


def bucket_energy(energy: torch.Tensor, buckets: torch.Tensor, response_mask: torch.Tensor) -> dict[str, float]:
    """`cancel/energy_b{k}`: share of per-token squared gradient norm per frequency bucket [D eq. 24]."""
    mask = response_mask.bool()
    per_bucket = torch.zeros(N_BUCKETS, dtype=torch.float64).index_add(0, buckets[mask], energy[mask].double())
    total = per_bucket.sum()
    shares = per_bucket / total if total > 0 else per_bucket
    return {f"cancel/energy_b{k}": float(shares[k]) for k in range(N_BUCKETS)}


def token_flips(
    old_log_prob: torch.Tensor, new_log_prob: torch.Tensor, advantages: torch.Tensor, response_mask: torch.Tensor
) -> dict[str, float]:
    """`cancel/flip_pos` / `cancel/flip_neg`: share of tokens in Â>0 (Â<0) rows whose log-prob fell
    (rose) over the update [C App. C]; 0 when the batch has no such row."""
    shift = new_log_prob - old_log_prob
    out = {}
    for key, rows, against in (
        ("cancel/flip_pos", advantages > 0, shift < 0),
        ("cancel/flip_neg", advantages < 0, shift > 0),
    ):
        tokens = response_mask.bool() & rows.unsqueeze(-1)
        n = int(tokens.sum())
        out[key] = float((against & tokens).sum()) / n if n else 0.0
    return out


class LogOddsProbe:
    """Log-odds between the digits and the words form of the correct answer on fixed eval prompts."""

    FORMS = ("digits", "words")

    def __init__(self, task: ArithmeticTask, problems: list[Problem]) -> None:
        P = task.max_prompt_len
        answers = [task.answer_ids(p, p.answer, form) for form in self.FORMS for p in problems]
        T = max(map(len, answers))
        response = torch.full((len(answers), T), PAD_ID, dtype=torch.long)
        for i, a in enumerate(answers):
            response[i, : len(a)] = torch.tensor(a)
        self.ids = torch.cat([prompt_block(task, problems * len(self.FORMS), P), response], dim=1)
        self.valid = self.ids != PAD_ID
        self.mask = self.valid[:, P:].float()
        self.prompt_len = P
        self.n = len(problems)

    @torch.no_grad()
    def logodds(self, model: TinyCausalLM) -> torch.Tensor:
        """[n] log π(digits | x) − log π(words | x), sequence log-probs at temperature 1."""
        seq = (response_forward(model, self.ids, self.valid, self.prompt_len).log_prob * self.mask).sum(-1)
        return seq[: self.n] - seq[self.n :]
