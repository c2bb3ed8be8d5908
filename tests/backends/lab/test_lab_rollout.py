import pytest
import torch

from cancelctl.backends.lab.policy import KVCache, PolicyConfig, TinyCausalLM, response_forward
from cancelctl.backends.lab.rollout import InferenceEngine, RolloutBatch, generate, top_p_filter
from cancelctl.backends.lab.task import EOS_ID, PAD_ID, VOCAB, ArithmeticTask


@pytest.fixture(scope="module")
def setup():
    torch.manual_seed(0)
    task = ArithmeticTask(max_operand=9, seed=0)
    model = TinyCausalLM(PolicyConfig(len(VOCAB), task.max_prompt_len + 16, d_model=32, n_layers=2, n_heads=4))
    return task, model


def sample(task, model, precision, G=4, temperature=1.0, top_p=1.0, seed=1):
    return generate(
        InferenceEngine(model, precision),
        task,
        task.train_problems[:6],
        G,
        max_new_tokens=16,
        temperature=temperature,
        top_p=top_p,
        generator=torch.Generator().manual_seed(seed),
    )


def test_kv_cache_decoding_matches_the_full_forward(setup):
    task, model = setup
    batch = sample(task, model, "fp32")
    full = model(batch.ids, batch.valid)
    P = batch.prompt_len
    caches = [KVCache() for _ in model.blocks]
    prompt_valid = batch.valid[:, :P]
    positions = (prompt_valid.long().cumsum(-1) - 1).clamp(min=0)
    steps = [model.decode_step(batch.ids[:, :P], positions, prompt_valid, caches)[:, -1]]
    for t in range(batch.response_mask.shape[1] - 1):
        key_valid = batch.valid[:, : P + t + 1]
        steps.append(
            model.decode_step(
                batch.ids[:, P + t : P + t + 1], prompt_valid.sum(-1, keepdim=True) + t, key_valid, caches
            )[:, -1]
        )
    cached = torch.stack(steps, dim=1)
    live = batch.response_mask.bool()
    assert torch.allclose(cached[live], full[:, P - 1 : -1][live], atol=1e-5)


def test_fp32_rollout_log_probs_equal_the_trainer_exactly(setup):
    task, model = setup
    batch = sample(task, model, "fp32", temperature=0.7)
    old = response_forward(model, batch.ids, batch.valid, batch.prompt_len, 0.7).log_prob * batch.response_mask
    assert torch.equal(old, batch.rollout_log_prob)


def test_bf16_rollout_log_probs_differ_but_stay_close(setup):
    task, model = setup
    batch = sample(task, model, "bf16")
    old = response_forward(model, batch.ids, batch.valid, batch.prompt_len).log_prob * batch.response_mask
    gap = (old - batch.rollout_log_prob).abs()[batch.response_mask.bool()]
    assert gap.max() > 0
    assert gap.max() < 0.2
    # the bf16 engine is a synced copy: the trainer keeps its fp32 weights
    assert all(p.dtype == torch.float32 for p in model.parameters())


def test_batch_layout(setup):
    task, model = setup
    batch = sample(task, model, "bf16", G=3)
    assert batch.size == 18
    assert batch.group_ids.tolist() == [g for g in range(6) for _ in range(3)]
    assert [p for p in batch.problems[::3]] == task.train_problems[:6]
    mask = batch.response_mask.bool()
    responses = batch.responses
    for i in range(batch.size):
        length = int(mask[i].sum())
        assert mask[i, :length].all() and not mask[i, length:].any()  # right-padded
        assert (responses[i, length:] == PAD_ID).all()
        if length < responses.shape[1]:
            assert responses[i, length - 1] == EOS_ID  # stopped at <eos>
    assert set(batch.rewards.tolist()) <= {0.0, 1.0}


def test_sampling_is_seeded(setup):
    task, model = setup
    a, b = sample(task, model, "bf16", seed=5), sample(task, model, "bf16", seed=5)
    assert torch.equal(a.ids, b.ids) and torch.equal(a.rollout_log_prob, b.rollout_log_prob)
    assert not torch.equal(a.ids, sample(task, model, "bf16", seed=6).ids)


def test_top_p_keeps_the_smallest_nucleus():
    probs = torch.tensor([[0.5, 0.3, 0.15, 0.05]])
    assert torch.allclose(top_p_filter(probs, 0.7), torch.tensor([[0.625, 0.375, 0.0, 0.0]]))
    assert torch.allclose(top_p_filter(probs, 0.5), torch.tensor([[1.0, 0.0, 0.0, 0.0]]))
    assert torch.equal(top_p_filter(probs, 1.0), probs)


def test_concat_pads_responses(setup):
    task, model = setup
    a = sample(task, model, "bf16", seed=1)
    b = a.select(list(range(4)))
    b = RolloutBatch(
        **{
            **b.__dict__,
            "ids": b.ids[:, :-2],
            "valid": b.valid[:, :-2],
            "response_mask": b.response_mask[:, :-2],
            "rollout_log_prob": b.rollout_log_prob[:, :-2],
        }
    )
    both = RolloutBatch.concat([b, a])
    assert both.size == a.size + 4
    assert both.ids.shape[1] == a.ids.shape[1]
    assert torch.equal(both.ids[4:], a.ids)
