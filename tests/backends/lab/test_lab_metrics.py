import pytest
import torch

from cancelctl.backends.lab.metrics import (
    TEMPLATE_BOOST_KEY,
    bucket_energy,
    eval_metrics,
    frequency_buckets,
    pass_key,
    template_boost,
    template_mask,
    token_flips,
)
from cancelctl.backends.lab.policy import PolicyConfig, TinyCausalLM, response_forward
from cancelctl.backends.lab.task import EOS_ID, PAD_ID, STOI, TEMPLATE, VOCAB, ArithmeticTask, Problem


def test_frequency_buckets_rank_types_by_count():
    # type 5 fills half the batch, type 4 a quarter, types 1..3 the rest
    responses = torch.tensor([[5, 5, 5, 5, 4, 4, 1, 2], [5, 5, 5, 5, 4, 4, 3, 3]])
    mask = torch.ones_like(responses, dtype=torch.float)
    buckets = frequency_buckets(responses, mask, vocab_size=8)
    assert (buckets[responses == 5] == 3).all()
    assert (buckets[responses == 4] == 1).all()  # its occurrences span the 25-50% quantiles
    assert buckets[0, 6] == 0 and buckets[0, 7] == 0
    # padding does not count towards frequencies
    mask[1, 4:] = 0
    assert frequency_buckets(responses, mask, vocab_size=8)[0, 0] == 3


def test_bucket_energy_shares_sum_to_one():
    buckets = torch.tensor([[0, 1, 2, 3], [3, 3, 0, 1]])
    energy = torch.tensor([[1.0, 2.0, 3.0, 4.0], [1.0, 1.0, 100.0, 5.0]])
    mask = torch.tensor([[1.0, 1, 1, 1], [1, 1, 0, 1]])
    shares = bucket_energy(energy, buckets, mask)
    assert abs(sum(shares.values()) - 1) < 1e-12
    assert shares["cancel/energy_b3"] == 6 / 17
    assert shares["cancel/energy_b0"] == 1 / 17  # the masked 100 is ignored
    assert bucket_energy(torch.zeros(2, 4), buckets, mask) == {f"cancel/energy_b{k}": 0.0 for k in range(4)}


def test_output_layer_energy_is_the_per_token_weight_gradient():
    """‖g_t‖²‖h_t‖² equals the squared norm of token t's own gradient on lm_head.weight."""
    torch.manual_seed(0)
    model = TinyCausalLM(PolicyConfig(vocab_size=11, max_len=8, d_model=16, n_layers=1, n_heads=2))
    ids = torch.randint(3, 11, (2, 8))
    valid = torch.ones_like(ids, dtype=torch.bool)
    coef = torch.randn(2, 5)
    out = response_forward(model, ids, valid, prompt_len=3)
    out.logits.retain_grad()
    (coef * out.log_prob).sum().backward()
    fast = out.logits.grad.pow(2).sum(-1) * out.hidden.detach().pow(2).sum(-1)
    for i, t in [(0, 0), (1, 3)]:
        model.zero_grad()
        out = response_forward(model, ids, valid, prompt_len=3)
        (coef[i, t] * out.log_prob[i, t]).backward()
        assert torch.allclose(model.lm_head.weight.grad.pow(2).sum(), fast[i, t], rtol=1e-4)


def test_token_flips_count_moves_against_the_row_sign():
    old = torch.zeros(3, 4)
    new = torch.tensor([[0.1, -0.1, 0.2, -0.3], [0.1, 0.1, -0.1, 0.0], [5.0, 5.0, 5.0, 5.0]])
    adv = torch.tensor([1.0, -1.0, 0.0])
    mask = torch.tensor([[1.0, 1, 1, 1], [1, 1, 1, 0], [1, 1, 1, 1]])
    flips = token_flips(old, new, adv, mask)
    assert flips["cancel/flip_pos"] == 2 / 4
    assert flips["cancel/flip_neg"] == 2 / 3
    assert token_flips(old, new, torch.zeros(3), mask) == {"cancel/flip_pos": 0.0, "cancel/flip_neg": 0.0}


# ---------------------------------------------------------------------- [C §3.2] template boost


def answer_batch() -> tuple[torch.Tensor, torch.Tensor]:
    """Three responses in three surface forms (right-padded), and their response mask."""
    task, p = ArithmeticTask(9, seed=0), Problem(3, 4, 0)
    rows = [task.answer_ids(p, 7, "digits"), task.answer_ids(p, 7, "words"), task.answer_ids(p, 7, "equation")]
    T = max(map(len, rows))
    responses = torch.tensor([r + [PAD_ID] * (T - len(r)) for r in rows])
    return responses, (responses != PAD_ID).float()


def test_template_mask_marks_the_shared_template_and_nothing_else():
    responses, mask = answer_batch()
    template = template_mask(responses)
    assert template[:, : len(TEMPLATE)].eq(1).all() and template[:, len(TEMPLATE) :].eq(0).all()
    assert (responses[template.bool()] != EOS_ID).all()
    broken = responses.clone()
    broken[0, 1] = STOI["7"]  # "the 7 is ...": only the tokens in their template place count
    assert template_mask(broken)[0].tolist()[:3] == [1.0, 0.0, 1.0]


class PositionPolicy(torch.nn.Module):
    """π(y_t) = softmax(W[t]): one free logit vector per response position, so an update of the
    positions it is asked to raise leaves every other position's log-probs exactly unchanged."""

    def __init__(self, T: int) -> None:
        super().__init__()
        self.logits = torch.nn.Parameter(torch.randn(T, len(VOCAB), generator=torch.Generator().manual_seed(0)))

    def log_prob(self, responses: torch.Tensor) -> torch.Tensor:
        logp = torch.log_softmax(self.logits, dim=-1).expand(len(responses), -1, -1)
        return logp.gather(-1, responses.unsqueeze(-1)).squeeze(-1)


def boost_after_raising(raise_template: bool, raise_reasoning: bool) -> float:
    """One gradient-ascent step on the log-probs of the chosen tokens; the template's share
    of the resulting boost on the batch's own tokens (log π after the step minus before)."""
    responses, mask = answer_batch()
    policy = PositionPolicy(responses.shape[1])
    template = template_mask(responses)
    chosen = mask * (raise_template * template + raise_reasoning * (1 - template))
    old = policy.log_prob(responses).detach() * mask
    (-(policy.log_prob(responses) * chosen).sum()).backward()
    with torch.no_grad():  # an SGD step, lr 0.5 (by hand: torch.optim's first step imports for seconds)
        policy.logits -= 0.5 * policy.logits.grad
    new = policy.log_prob(responses).detach() * mask
    return template_boost(responses, old, new, mask)[TEMPLATE_BOOST_KEY]


def test_template_boost_is_one_when_an_update_raises_only_template_tokens_and_zero_for_reasoning_tokens():
    assert boost_after_raising(raise_template=True, raise_reasoning=False) == 1.0
    assert boost_after_raising(raise_template=False, raise_reasoning=True) == 0.0
    assert 0.0 < boost_after_raising(raise_template=True, raise_reasoning=True) < 1.0


def test_template_boost_counts_only_rises_on_real_tokens():
    responses, mask = answer_batch()
    old = torch.zeros(responses.shape)
    new = torch.zeros(responses.shape)
    new[0, 0], new[0, 3], new[1, 4] = 0.3, 0.1, -5.0  # a template rise, a reasoning rise, a fall
    new[2, -1] = 9.0 if mask[2, -1] == 0 else 0.0  # padding never counts
    assert template_boost(responses, old, new, mask)[TEMPLATE_BOOST_KEY] == pytest.approx(0.75)
    assert template_boost(responses, old, old, mask) == {TEMPLATE_BOOST_KEY: 0.0}  # nothing rose


# ---------------------------------------------------------------------- eval: avg@k and pass@k


def test_eval_logs_avg_at_k_and_unbiased_pass_at_k_per_power_of_two():
    # 3 prompts × k = 4 adjacent samples: 0, 1 and 4 correct
    rewards = torch.tensor([0, 0, 0, 0, 0, 1, 0, 0, 1, 1, 1, 1], dtype=torch.float)
    out = eval_metrics(rewards, 4)
    assert out == {
        "val-core/lab/acc/mean_at_4": pytest.approx(5 / 12),
        pass_key(1): pytest.approx((0 + 1 / 4 + 1) / 3),
        pass_key(2): pytest.approx((0 + 1 / 2 + 1) / 3),  # 1 − C(3, 2)/C(4, 2) = 1/2
        pass_key(4): pytest.approx((0 + 1 + 1) / 3),
    }
    assert set(eval_metrics(torch.ones(6), 6)) == {"val-core/lab/acc/mean_at_6", *(pass_key(k) for k in (1, 2, 4, 6))}
