import torch

from cancelctl.backends.lab.metrics import bucket_energy, frequency_buckets, token_flips
from cancelctl.backends.lab.policy import PolicyConfig, TinyCausalLM, response_forward


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
