"""Batched token generation on a Hugging Face causal LM, for the `hf_cpu` rollout server (rollout.py).

`BatchingGenerator.generate(request)` is called concurrently (one coroutine per rollout request);
requests that arrive within `batch_window_s`, or while a batch is running, are generated together:
prompts padded on the left, one forward per new token with the KV cache. Each request keeps its own
sampling settings:

- temperature T (0 = greedy: argmax, log-probs at T = 1), top-k (<= 0: off), top-p (1: off), both
  applied to the distribution at temperature T before sampling;
- `max_tokens` new tokens at most;
- stop tokens (eos ids plus `stop_token_ids`): the stop token is the last one returned.

The log-prob returned for each generated token is log_softmax(logits / T) of that token over the
whole vocabulary (not the top-k/top-p renormalised one), which is what verl's actor recomputes and
compares (`training/rollout_probs_diff_*`, bypass / IS corrections). The model runs in its own dtype,
the rollout's (rollout.py: verl's `rollout.dtype`): a bf16 model's logits come out of its lm_head in
bf16, and sampling and log_softmax run in fp32 on them, as vLLM's sampler does — so a bf16 rollout's
log-probs carry bf16's rounding against an fp32 trainer's recompute, the mismatch [H] measures.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

import torch


@dataclass(frozen=True)
class Request:
    prompt_ids: list[int]
    max_tokens: int
    temperature: float = 1.0
    top_p: float = 1.0
    top_k: int = -1
    stop_token_ids: frozenset[int] = frozenset()


@dataclass(frozen=True)
class Generation:
    token_ids: list[int]
    log_probs: list[float]
    finish_reason: str  # "stop" (a stop token) or "length" (max_tokens)


def request_from_sampling_params(
    prompt_ids: Iterable[int],
    sampling_params: Mapping[str, Any],
    *,
    response_length: int,
    eos_token_ids: Iterable[int],
) -> Request:
    """verl's agent-loop sampling params (`temperature, top_p, top_k, ...`, no max_tokens) as a Request.

    The budget is the rollout's `response_length` (verl's agent loop sends none), or a smaller
    `max_tokens` / `max_new_tokens` if the caller gives one.
    """
    max_tokens = response_length
    for key in ("max_tokens", "max_new_tokens"):
        if sampling_params.get(key) is not None:
            max_tokens = min(max_tokens, int(sampling_params[key]))
    top_k = sampling_params.get("top_k")
    top_p = sampling_params.get("top_p")
    temperature = sampling_params.get("temperature")
    return Request(
        prompt_ids=[int(t) for t in prompt_ids],
        max_tokens=max_tokens,
        temperature=1.0 if temperature is None else float(temperature),
        top_p=1.0 if top_p is None else float(top_p),
        top_k=-1 if top_k is None else int(top_k),
        stop_token_ids=frozenset(int(t) for t in eos_token_ids)
        | frozenset(sampling_params.get("stop_token_ids") or ()),
    )


def choose_tokens(
    logits: torch.Tensor, requests: list[Request], generator: torch.Generator
):
    """Next token per row and its log_softmax(logits / T) (T = 1 for greedy rows)."""
    vocab = logits.shape[-1]
    temps = torch.tensor([r.temperature for r in requests], dtype=logits.dtype)
    greedy = temps <= 0
    scaled = logits / torch.where(greedy, torch.ones_like(temps), temps)[:, None]
    log_probs = torch.log_softmax(scaled, dim=-1)

    sorted_lp, sorted_idx = log_probs.sort(dim=-1, descending=True)
    top_k = torch.tensor([r.top_k if 0 < r.top_k < vocab else vocab for r in requests])
    top_p = torch.tensor([r.top_p for r in requests], dtype=logits.dtype)
    probs = sorted_lp.exp()
    remove = torch.arange(vocab)[None, :] >= top_k[:, None]
    # top-p keeps the smallest prefix with mass >= p (p = 1: off, so float round-off drops no tail token)
    mass_before = probs.cumsum(-1) - probs
    remove |= (mass_before >= top_p[:, None]) & (top_p[:, None] < 1.0)
    remove[:, 0] = False
    kept = sorted_lp.masked_fill(remove, float("-inf"))
    picked = torch.multinomial(torch.softmax(kept, dim=-1), 1, generator=generator)
    sampled = sorted_idx.gather(1, picked).squeeze(1)
    tokens = torch.where(greedy, logits.argmax(-1), sampled)
    return tokens, log_probs.gather(1, tokens[:, None]).squeeze(1)


@torch.no_grad()
def generate_batch(
    model, requests: list[Request], *, pad_token_id: int, generator: torch.Generator
) -> list[Generation]:
    """Generate every request in one left-padded batch (one forward per new token, KV cache)."""
    width = max(len(r.prompt_ids) for r in requests)
    n = len(requests)
    input_ids = torch.full((n, width), pad_token_id, dtype=torch.long)
    mask = torch.zeros((n, width), dtype=torch.long)
    for i, r in enumerate(requests):
        input_ids[i, width - len(r.prompt_ids) :] = torch.tensor(
            r.prompt_ids, dtype=torch.long
        )
        mask[i, width - len(r.prompt_ids) :] = 1
    positions = (mask.cumsum(-1) - 1).clamp(min=0)

    tokens: list[list[int]] = [[] for _ in requests]
    log_probs: list[list[float]] = [[] for _ in requests]
    finish = ["length" if r.max_tokens <= 0 else "" for r in requests]
    past = None
    step_ids, step_positions = input_ids, positions
    for _ in range(max(r.max_tokens for r in requests)):
        if all(finish):
            break
        out = model(
            input_ids=step_ids,
            attention_mask=mask,
            position_ids=step_positions,
            past_key_values=past,
            use_cache=True,
        )
        past = out.past_key_values
        chosen, chosen_lp = choose_tokens(
            out.logits[:, -1, :].float(), requests, generator
        )
        for i, r in enumerate(requests):
            if finish[i]:
                continue
            token = int(chosen[i])
            tokens[i].append(token)
            log_probs[i].append(float(chosen_lp[i]))
            if token in r.stop_token_ids:
                finish[i] = "stop"
            elif len(tokens[i]) >= r.max_tokens:
                finish[i] = "length"
        step_ids = chosen[:, None]
        step_positions = step_positions[:, -1:] + 1
        mask = torch.cat([mask, torch.ones((n, 1), dtype=mask.dtype)], dim=1)
    return [
        Generation(t, lp, f or "length") for t, lp, f in zip(tokens, log_probs, finish)
    ]


class BatchingGenerator:
    """Concurrent `generate` calls, generated in batches (module docstring).

    Batches run in a worker thread, so the event loop keeps accepting requests meanwhile; a lock
    keeps `load_state_dict` from running in the middle of a batch. `batches` and `forwards` count
    the work done (tests and the server's log line read them).
    """

    def __init__(
        self,
        model,
        *,
        pad_token_id: int,
        seed: int = 0,
        batch_window_s: float = 0.005,
        max_batch_size: int = 256,
    ):
        self.model = model.eval()
        self.pad_token_id = pad_token_id
        self.batch_window_s = batch_window_s
        self.max_batch_size = max_batch_size
        self.generator = torch.Generator().manual_seed(seed)
        self.lock = threading.Lock()
        self.batches = 0
        self.requests = 0
        self._queue: list[tuple[Request, asyncio.Future]] = []
        self._runner: asyncio.Task | None = None

    async def generate(self, request: Request) -> Generation:
        future = asyncio.get_running_loop().create_future()
        self._queue.append((request, future))
        if self._runner is None or self._runner.done():
            self._runner = asyncio.create_task(self._run())
        return await future

    async def _run(self) -> None:
        while self._queue:
            await asyncio.sleep(
                self.batch_window_s
            )  # let requests sent together arrive together
            batch, self._queue = (
                self._queue[: self.max_batch_size],
                self._queue[self.max_batch_size :],
            )
            try:
                results = await asyncio.to_thread(
                    self._generate, [request for request, _ in batch]
                )
            except Exception as exc:  # noqa: BLE001 - every waiting request gets the error
                for _, future in batch:
                    if not future.done():
                        future.set_exception(exc)
                continue
            for (_, future), result in zip(batch, results):
                if not future.done():
                    future.set_result(result)

    def _generate(self, requests: list[Request]) -> list[Generation]:
        with self.lock:
            self.batches += 1
            self.requests += len(requests)
            return generate_batch(
                self.model,
                requests,
                pad_token_id=self.pad_token_id,
                generator=self.generator,
            )

    def load_state_dict(
        self, state: Mapping[str, torch.Tensor]
    ) -> tuple[list[str], list[str]]:
        """Copy the trainer's tensors into the model (cast to its dtype: fp32 masters round to a bf16
        rollout's); returns (missing, unexpected)."""
        with self.lock:
            result = self.model.load_state_dict(dict(state), strict=False)
        return list(result.missing_keys), list(result.unexpected_keys)
