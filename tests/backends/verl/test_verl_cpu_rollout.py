"""The `hf_cpu` rollout's generator and server, in-process on a tiny random Qwen2 (no Ray, no download).

Checks against a plain forward of prompt + response: the returned log-probs are
log_softmax(logits / T) of the chosen tokens, greedy is the argmax, stop tokens and max tokens end a
sequence, concurrent requests run as one batch (forward calls counted), and the server takes new
weights with a version bump. The rollout's precision (verl's `rollout.dtype`): a bf16 server
generates with a bf16 model, takes fp32 weights cast to bf16, and its log-probs differ from the fp32
trainer's (the train–inference mismatch [H] studies); an fp32 server's agree with the trainer's.
"""

from __future__ import annotations

import asyncio
import sys
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")
pytest.importorskip("verl")

from cancelctl.backends.verl.cpu.generator import (
    BatchingGenerator,
    Request,
    generate_batch,
    request_from_sampling_params,
)

pytestmark = pytest.mark.verl

sys.path.insert(0, str(Path(__file__).resolve().parent))
from tiny_verl import build_model

PROMPTS = [[257, 84, 82, 198, 50], [71, 72, 220, 83, 71, 68, 81, 68, 198], [64]]


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory):
    path = tmp_path_factory.mktemp("tiny_qwen2")
    build_model(path)
    return path


@pytest.fixture
def model(model_dir):
    from transformers import AutoModelForCausalLM

    return AutoModelForCausalLM.from_pretrained(
        model_dir, dtype=torch.float32, attn_implementation="sdpa"
    ).eval()


def reference_log_probs(model, prompt, response, temperature):
    """log_softmax(logits / T) of each response token, from one unpadded forward."""
    ids = torch.tensor([prompt + response])
    with torch.no_grad():
        logits = model(input_ids=ids).logits[0, len(prompt) - 1 : -1].float()
    t = temperature if temperature > 0 else 1.0
    return (
        torch.log_softmax(logits / t, -1)
        .gather(1, torch.tensor(response)[:, None])
        .squeeze(1)
    )


def run(requests, model, seed=0):
    return generate_batch(
        model, requests, pad_token_id=256, generator=torch.Generator().manual_seed(seed)
    )


@pytest.mark.parametrize(
    "temperature, top_p, top_k",
    [(1.0, 1.0, -1), (0.7, 0.9, 50), (0.0, 1.0, -1), (1.3, 1.0, 5)],
)
def test_log_probs_are_log_softmax_of_logits_over_t(model, temperature, top_p, top_k):
    requests = [
        Request(p, max_tokens=8, temperature=temperature, top_p=top_p, top_k=top_k)
        for p in PROMPTS
    ]
    for request, out in zip(requests, run(requests, model)):
        assert len(out.token_ids) == len(out.log_probs) == 8
        expected = reference_log_probs(
            model, request.prompt_ids, out.token_ids, temperature
        )
        assert torch.allclose(torch.tensor(out.log_probs), expected, atol=1e-5), (
            out.log_probs,
            expected,
        )


def test_greedy_is_the_argmax_and_deterministic(model):
    greedy = [Request(p, max_tokens=6, temperature=0.0) for p in PROMPTS]
    first = run(greedy, model, seed=1)
    again = run(
        [greedy[1], Request(PROMPTS[0], max_tokens=3, temperature=1.0)], model, seed=2
    )
    assert first[1].token_ids == again[0].token_ids
    for request, out in zip(greedy, first):
        ids = request.prompt_ids + out.token_ids
        with torch.no_grad():
            logits = model(input_ids=torch.tensor([ids])).logits[
                0, len(request.prompt_ids) - 1 : -1
            ]
        assert logits.argmax(-1).tolist() == out.token_ids


def test_top_k_one_and_tiny_top_p_sample_the_argmax(model):
    greedy = run([Request(PROMPTS[1], max_tokens=6, temperature=0.0)], model)[
        0
    ].token_ids
    narrow = [
        Request(PROMPTS[1], max_tokens=6, temperature=1.5, top_k=1),
        Request(PROMPTS[1], max_tokens=6, top_p=1e-6),
    ]
    assert [out.token_ids for out in run(narrow, model, seed=3)] == [greedy, greedy]


def test_stop_token_ends_the_sequence_and_max_tokens_caps_it(model):
    greedy = run([Request(PROMPTS[0], max_tokens=6, temperature=0.0)], model)[
        0
    ].token_ids
    stop = greedy[2]
    params = {"temperature": 0, "stop_token_ids": [stop]}
    stopped = run(
        [
            request_from_sampling_params(
                PROMPTS[0], params, response_length=6, eos_token_ids=[]
            )
        ],
        model,
    )[0]
    assert (
        stopped.token_ids == greedy[: greedy.index(stop) + 1]
        and stopped.finish_reason == "stop"
    )
    eos = request_from_sampling_params(
        PROMPTS[0], {"temperature": 0}, response_length=6, eos_token_ids=[stop]
    )
    assert run([eos], model)[0].token_ids[-1] == stop
    capped = request_from_sampling_params(
        PROMPTS[0],
        {"temperature": 1, "max_tokens": 3},
        response_length=6,
        eos_token_ids=[],
    )
    assert capped.max_tokens == 3 and len(run([capped], model)[0].token_ids) == 3
    assert (
        request_from_sampling_params(
            PROMPTS[0], {"max_tokens": 99}, response_length=6, eos_token_ids=[]
        ).max_tokens
        == 6
    )
    out = run(
        [Request(PROMPTS[0], max_tokens=2), Request(PROMPTS[1], max_tokens=5)], model
    )
    assert [len(o.token_ids) for o in out] == [2, 5] and {
        o.finish_reason for o in out
    } == {"length"}


def test_concurrent_requests_are_generated_in_one_batch(model):
    forwards = []
    original = model.forward

    def counting_forward(*args, **kwargs):
        forwards.append(kwargs["input_ids"].shape[0])
        return original(*args, **kwargs)

    model.forward = counting_forward
    engine = BatchingGenerator(model, pad_token_id=256)

    async def many():
        requests = [
            Request(PROMPTS[i % 3], max_tokens=4, temperature=0.0 if i % 2 else 1.0)
            for i in range(6)
        ]
        return await asyncio.gather(*(engine.generate(r) for r in requests))

    results = asyncio.run(many())
    assert [len(r.token_ids) for r in results] == [4] * 6
    assert engine.batches == 1 and forwards == [
        6,
        6,
        6,
        6,
    ]  # 4 forwards of 6 rows, not 24 of 1


def test_server_returns_token_outputs_and_takes_new_weights(model_dir):
    from cancelctl.backends.verl.cpu.rollout import HFCpuRolloutServer

    server = HFCpuRolloutServer("test", str(model_dir), response_length=5)
    assert (
        server.eos_token_ids
    )  # <|im_end|> and <|endoftext|> from the generation config

    async def generate():
        return await server.generate(
            request_id="r", prompt_ids=PROMPTS[1], sampling_params={"temperature": 0}
        )

    before = asyncio.run(generate())
    assert (
        len(before.log_probs) == len(before.token_ids) <= 5
        and before.stop_reason == "completed"
    )
    state = {
        k: v + 0.5 * torch.randn_like(v)
        for k, v in server.engine.model.state_dict().items()
    }
    assert asyncio.run(server.update_weights(state, global_steps=0)) == 1
    assert asyncio.run(server.update_weights(state, global_steps=1)) == 2
    after = asyncio.run(generate())
    assert after.extra_fields == {"global_steps": 1, "weight_version": 2}
    assert torch.equal(
        server.engine.model.state_dict()["lm_head.weight"], state["lm_head.weight"]
    )
    assert after.log_probs != before.log_probs


def trainer_and_synced_weights(model_dir):
    """The fp32 trainer's model, moved off its initial weights, and those weights (fp32), as verl syncs them."""
    from transformers import AutoModelForCausalLM

    trainer = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32, attn_implementation="sdpa").eval()
    torch.manual_seed(1)
    state = {k: v + 0.05 * torch.randn_like(v) for k, v in trainer.state_dict().items()}
    trainer.load_state_dict(state)
    return trainer, state


@pytest.mark.parametrize("dtype", ["bfloat16", "float32"])
def test_the_server_generates_in_the_rollout_dtype_against_the_fp32_trainer(model_dir, dtype):
    from cancelctl.backends.verl.cpu.rollout import HFCpuRolloutServer

    trainer, state = trainer_and_synced_weights(model_dir)
    server = HFCpuRolloutServer("test", str(model_dir), response_length=8, dtype=dtype)
    asyncio.run(server.update_weights(state, global_steps=0))
    expected = getattr(torch, dtype)
    assert {p.dtype for p in server.engine.model.parameters()} == {expected}  # synced fp32 cast on load
    assert torch.equal(server.engine.model.lm_head.weight, state["lm_head.weight"].to(expected))

    async def generate():
        return await asyncio.gather(
            *(server.generate(request_id=str(i), prompt_ids=p, sampling_params={"temperature": 1.0})
              for i, p in enumerate(PROMPTS))
        )  # fmt: skip

    outs = asyncio.run(generate())
    # [H] eq. 5: rho = pi_train / pi_infer per token; the trainer recomputes the rollout's tokens in fp32
    diff = torch.cat(
        [reference_log_probs(trainer, p, o.token_ids, 1.0) - torch.tensor(o.log_probs) for p, o in zip(PROMPTS, outs)]
    )
    rho_std = diff.exp().std().item()
    print(dtype, "max |dlogp|", diff.abs().max().item(), "std(rho)", rho_std)
    if dtype == "float32":
        assert diff.abs().max() < 5e-6  # the trainer's log-probs, to fp32 rounding
    else:
        assert diff.abs().mean() > 1e-4 and rho_std > 1e-3  # bf16 weights and activations: a mismatch


def test_the_adapter_ships_the_trainers_weights_in_the_rollout_dtype():
    from verl.workers.config import RolloutConfig

    from cancelctl.backends.verl.cpu.rollout import HFCpuServerAdapter

    shipped = {}

    class Server:  # the replica's server actor: what `update_weights.remote` receives
        class update_weights:
            @staticmethod
            async def remote(state, global_steps):
                shipped.update(state)

    adapter = HFCpuServerAdapter(RolloutConfig(name="hf_cpu", dtype="bfloat16", tensor_model_parallel_size=1), None, None)
    adapter._server = Server()
    weights = [("w", torch.randn(3, 2)), ("steps", torch.arange(3))]
    asyncio.run(adapter.update_weights(iter(weights), global_steps=0))
    assert shipped["w"].dtype == torch.bfloat16 and torch.equal(shipped["w"], weights[0][1].to(torch.bfloat16))
    assert shipped["steps"].dtype == torch.int64  # integer buffers keep theirs
