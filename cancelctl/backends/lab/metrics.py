"""The lab's step keys and its log-odds probe. The mechanism math is `losses.metrics`, shared with verl:

- `frequency_buckets` / `bucket_energy`: [D eq. 24] Energy(B) = Σ_{t∈B} ‖∇θ ℓ_t‖² / Σ_t ‖∇θ ℓ_t‖²
  with θ the unembedding: the lab feeds exact per-token energies ‖g_t‖²‖h_t‖² (g_t = ∂loss/∂z_t from
  autograd), the output-layer quantity of [C eq. 6-7], computed, not estimated.
- `token_flips`: [C App. C] over one step's update (both log-probs from fp32 trainer forwards).
- `template_boost`: [C §3.2] the share of one step's probability boost (the positive part of
  Δ log π on the step's sampled tokens, from the same two forwards) that falls on the template
  "the answer is", the tokens every response shares by construction (`task.TEMPLATE`).
- `logodds`: [D App. A.3] log π(y_a|x) − log π(y_b|x) for two equivalent correct answers.
- `mismatch`: π_train vs π_infer of one step [H]; `mean_over_passes`: a step's per-update metrics.
"""

from __future__ import annotations

import torch

import losses
from cancelctl.backends.lab.policy import TinyCausalLM, response_forward
from cancelctl.backends.lab.rollout import prompt_block
from cancelctl.backends.lab.task import PAD_ID, STOI, TEMPLATE, ArithmeticTask, Problem
from cancelctl.spec.metric_keys import REWARD_KEY
from cancelctl.stats.pass_at_k import mean_pass_at_k, pass_ks
from losses.metrics import boost_share, bucket_energy, frequency_buckets, token_flips

__all__ = ["N_BUCKETS", "STEP_KEYS", "TEMPLATE_BOOST_KEY", "LogOddsProbe", "bucket_energy", "eval_key",
           "eval_metrics", "frequency_buckets", "mean_over_passes", "mismatch", "pass_key", "template_boost",
           "template_mask", "token_flips"]

N_BUCKETS = 4
TEMPLATE_BOOST_KEY = "cancel/boost_template"  # [C §3.2]: the template's share of the step's boost

# Logged at every training step (docs/metrics.md, verl's names); eval adds `eval_metrics`.
STEP_KEYS = (
    REWARD_KEY,
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
    "dfpo/weight_dispersion",
    *(f"cancel/energy_b{k}" for k in range(N_BUCKETS)),
    "cancel/flip_pos",
    "cancel/flip_neg",
    TEMPLATE_BOOST_KEY,
    "compute/gen_tokens",
    "compute/gen_tokens_cum",
    "compute/update_steps_cum",
    "compute/hours_cum",
    "lab/logodds_drift",
)


def eval_key(k: int) -> str:
    """avg@k accuracy on the held-out prompts (verl's val-core/<source>/<metric>/mean@k, '@' spelled out)."""
    return f"val-core/lab/acc/mean_at_{k}"


def pass_key(k: int) -> str:
    """pass@k on the held-out prompts, Chen et al.'s unbiased estimator from the eval's samples
    (`cancelctl.stats.pass_at_k`); verl's nearest is val-core/<source>/acc/best@k/mean, a bootstrap."""
    return f"val-core/lab/acc/pass_at_{k}"


def eval_metrics(rewards: torch.Tensor, k: int) -> dict[str, float]:
    """avg@k and pass@j for j = 1, 2, 4, … up to k (`pass_ks`) from 0/1 `rewards`, k adjacent rows per prompt."""
    correct = rewards.view(-1, k).sum(-1).round().long().numpy()
    out = {eval_key(k): float(rewards.mean())}
    out.update({pass_key(j): mean_pass_at_k(k, correct, j) for j in pass_ks(k)})
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


def template_mask(responses: torch.Tensor) -> torch.Tensor:
    """[N, T] float: 1 on a response's template tokens — "the answer is" at its first three
    positions, where every well-formed response has them — else 0 (a response that does not open
    with a template word has none there)."""
    mask = torch.zeros(responses.shape, dtype=torch.float32)
    width = min(len(TEMPLATE), responses.shape[1])
    template = torch.tensor([STOI[t] for t in TEMPLATE[:width]])
    mask[:, :width] = (responses[:, :width] == template).float()
    return mask


def template_boost(
    responses: torch.Tensor, old_log_prob: torch.Tensor, new_log_prob: torch.Tensor, response_mask: torch.Tensor
) -> dict[str, float]:
    """`cancel/boost_template`: the template tokens' share of the step's probability boost [C §3.2]."""
    share = boost_share(old_log_prob, new_log_prob, response_mask, template_mask(responses))
    return {TEMPLATE_BOOST_KEY: share}


PASS_KEYS = ("actor/pg_loss", "actor/pg_clipfrac", "actor/pg_clipfrac_lower", "actor/ppo_kl", "actor/grad_norm",
             "dfpo/ortho_residual")  # fmt: skip


def mean_over_passes(passes: list[dict[str, float]]) -> dict[str, float]:
    """Per-pass metrics averaged over the step's optimizer steps (as verl averages micro-batches);
    0 for a step without any (sign_split on a batch with no Â≠0 row)."""
    keys = {k for p in passes for k in p} | set(PASS_KEYS)
    return {k: sum(p[k] for p in passes if k in p) / max(sum(k in p for p in passes), 1) for k in sorted(keys)}


def mismatch(old_log_prob: torch.Tensor, rollout_log_prob: torch.Tensor, mask: torch.Tensor) -> dict[str, float]:
    """`mismatch/*` of one step (losses.mismatch_metrics); a PCC of a constant probability vector
    (NaN) is 1 when the two copies agree exactly, else 0."""
    out = losses.mismatch_metrics(old_log_prob, rollout_log_prob, mask)
    if out["mismatch/pcc"] != out["mismatch/pcc"]:  # NaN: a constant probability vector
        identical = bool(torch.equal(old_log_prob * mask, rollout_log_prob * mask))
        out["mismatch/pcc"] = 1.0 if identical else 0.0
    return out
