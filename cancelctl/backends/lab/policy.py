"""The lab policy: a tiny pre-LN causal transformer, plus the per-token log-probs RL needs.

Sequences are [left-padded prompt | right-padded response]: every response starts at the same
column, so response log-probs are one slice of the logits. Positions count from each row's first
real token, so left padding does not shift a prompt. The unembedding (`lm_head`) is untied and has
no bias: its per-token gradient is the outer product g_t h_tᵀ, whose norm the energy metric uses.
With `moe_experts` > 0 each block's MLP is a top-k routed mixture of experts (`MoEFeedForward`).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import nn


@dataclass(frozen=True)
class PolicyConfig:
    vocab_size: int
    max_len: int
    d_model: int = 64
    n_layers: int = 2
    n_heads: int = 4
    moe_experts: int = 0  # 0: one dense MLP per block
    moe_top_k: int = 0


def round_mantissa(x: torch.Tensor, bits: int) -> torch.Tensor:
    """fp32 `x` rounded to `bits` mantissa bits, round-to-nearest-even (7 bits = bfloat16's rounding):
    a simulated low-precision number format for the inference copy's logits."""
    x = x.float()
    shift = 23 - bits
    if shift <= 0:
        return x
    i = x.view(torch.int32)
    round_half_even = ((1 << (shift - 1)) - 1) + ((i >> shift) & 1)
    return ((i + round_half_even) & ~((1 << shift) - 1)).view(torch.float32)


def mlp(d_model: int) -> nn.Sequential:
    return nn.Sequential(nn.Linear(d_model, 4 * d_model), nn.GELU(), nn.Linear(4 * d_model, d_model))


class MoEFeedForward(nn.Module):
    """Top-k mixture of experts: a bias-free linear router scores the experts per token, the token goes
    to the k best, their outputs are mixed with gates = those experts' softmax probabilities over all
    experts (Switch Transformer's rule, not renormalised: at k = 1 a renormalised gate would be the
    constant 1 and the router would get no gradient). Routing is a hard, discontinuous choice: two copies whose router logits differ by rounding
    can send a near-tie token to different experts. `round_bits` (set on the inference copy only)
    rounds the router logits to that many mantissa bits."""

    def __init__(self, d_model: int, experts: int, top_k: int) -> None:
        super().__init__()
        self.top_k = top_k
        self.router = nn.Linear(d_model, experts, bias=False)
        self.experts = nn.ModuleList(mlp(d_model) for _ in range(experts))
        self.round_bits: int | None = None

    def route(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """x [n, D] → chosen experts [n, k] (best first) and their gates [n, k]."""
        scores = self.router(x)
        if self.round_bits is not None:
            scores = round_mantissa(scores, self.round_bits).to(scores.dtype)
        chosen = scores.topk(self.top_k, dim=-1).indices
        gates = torch.softmax(scores.float(), dim=-1).gather(-1, chosen)
        return chosen, gates.to(x.dtype)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        flat = x.reshape(-1, x.shape[-1])
        chosen, gates = self.route(flat)
        out = torch.zeros_like(flat)
        for e, expert in enumerate(self.experts):  # each expert runs on its own tokens only
            rows, slot = (chosen == e).nonzero(as_tuple=True)
            if rows.numel():
                out.index_add_(0, rows, expert(flat[rows]) * gates[rows, slot].unsqueeze(-1))
        return out.view(x.shape)


class Block(nn.Module):
    def __init__(self, d_model: int, n_heads: int, moe_experts: int = 0, moe_top_k: int = 0) -> None:
        super().__init__()
        self.n_heads = n_heads
        self.ln1 = nn.LayerNorm(d_model)
        self.qkv = nn.Linear(d_model, 3 * d_model)
        self.proj = nn.Linear(d_model, d_model)
        self.ln2 = nn.LayerNorm(d_model)
        self.mlp = MoEFeedForward(d_model, moe_experts, moe_top_k) if moe_experts else mlp(d_model)

    def forward(self, x: torch.Tensor, attn_mask: torch.Tensor, cache: KVCache | None = None) -> torch.Tensor:
        B, L, D = x.shape
        q, k, v = self.qkv(self.ln1(x)).view(B, L, 3, self.n_heads, D // self.n_heads).permute(2, 0, 3, 1, 4)
        if cache is not None:
            k, v = cache.extend(k, v)
        att = F.scaled_dot_product_attention(q, k, v, attn_mask=attn_mask)
        x = x + self.proj(att.transpose(1, 2).reshape(B, L, D))
        return x + self.mlp(self.ln2(x))


class KVCache:
    """Keys/values of one layer for incremental decoding (generation only)."""

    def __init__(self) -> None:
        self.k: torch.Tensor | None = None
        self.v: torch.Tensor | None = None

    def extend(self, k: torch.Tensor, v: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        self.k = k if self.k is None else torch.cat([self.k, k], dim=2)
        self.v = v if self.v is None else torch.cat([self.v, v], dim=2)
        return self.k, self.v

    def repeat_rows(self, n: int) -> None:
        """Each cached row n times (row i → rows i*n .. i*n+n-1): a shared prompt's keys for its group."""
        self.k, self.v = self.k.repeat_interleave(n, dim=0), self.v.repeat_interleave(n, dim=0)


class TinyCausalLM(nn.Module):
    def __init__(self, cfg: PolicyConfig) -> None:
        super().__init__()
        self.cfg = cfg
        self.tok_emb = nn.Embedding(cfg.vocab_size, cfg.d_model)
        self.pos_emb = nn.Embedding(cfg.max_len, cfg.d_model)
        self.blocks = nn.ModuleList(
            Block(cfg.d_model, cfg.n_heads, cfg.moe_experts, cfg.moe_top_k) for _ in range(cfg.n_layers)
        )
        self.ln_f = nn.LayerNorm(cfg.d_model)
        self.lm_head = nn.Linear(cfg.d_model, cfg.vocab_size, bias=False)
        self.apply(_init)

    def forward(self, ids: torch.Tensor, valid: torch.Tensor, return_hidden: bool = False):
        """ids, valid: [B, L] (valid = not padding). Returns logits [B, L, V] (and final hidden [B, L, D])."""
        L = ids.shape[1]
        positions = (valid.long().cumsum(-1) - 1).clamp(min=0)
        causal = torch.ones(L, L, dtype=torch.bool, device=ids.device).tril()
        # a padding query attends to itself only, so no row of the mask is empty (NaN-free softmax)
        keys = valid[:, None, None, :] | torch.eye(L, dtype=torch.bool, device=ids.device)
        attn_mask = causal & keys
        x = self.tok_emb(ids) + self.pos_emb(positions)
        for block in self.blocks:
            x = block(x, attn_mask)
        h = self.ln_f(x)
        logits = self.lm_head(h)
        return (logits, h) if return_hidden else logits

    def decode_step(
        self, ids: torch.Tensor, positions: torch.Tensor, key_valid: torch.Tensor, caches: list[KVCache]
    ) -> torch.Tensor:
        """Incremental forward of new columns `ids` [B, n] given cached keys; key_valid [B, cached + n].
        Returns logits [B, n, V]. The first call (empty caches) is the prompt pass."""
        n, Lk = ids.shape[1], key_valid.shape[1]
        causal = torch.ones(n, Lk, dtype=torch.bool, device=ids.device).tril(diagonal=Lk - n)
        self_key = torch.zeros(n, Lk, dtype=torch.bool, device=ids.device)
        self_key[:, Lk - n :] = torch.eye(n, dtype=torch.bool)
        attn_mask = causal & (key_valid[:, None, None, :] | self_key)
        x = self.tok_emb(ids) + self.pos_emb(positions)
        for block, cache in zip(self.blocks, caches, strict=True):
            x = block(x, attn_mask, cache)
        return self.lm_head(self.ln_f(x))


def _init(module: nn.Module) -> None:
    if isinstance(module, (nn.Linear, nn.Embedding)):
        nn.init.normal_(module.weight, std=0.02)
    if isinstance(module, nn.Linear) and module.bias is not None:
        nn.init.zeros_(module.bias)


@dataclass
class ResponseOutput:
    log_prob: torch.Tensor  # [N, T] log π(y_t | y_<t, x) of the taken tokens, at the temperature
    logits: torch.Tensor  # [N, T, V] raw lm_head outputs that predicted them (before temperature)
    hidden: torch.Tensor  # [N, T, D] final hidden states feeding lm_head


def response_forward(
    model: TinyCausalLM, ids: torch.Tensor, valid: torch.Tensor, prompt_len: int, temperature: float = 1.0
) -> ResponseOutput:
    """Log-probs of the response tokens (columns prompt_len..) under `model`, at the sampling temperature
    (verl divides logits by the rollout temperature before log-softmax, so π_train matches π_infer)."""
    logits, hidden = model(ids, valid, return_hidden=True)
    logits = logits[:, prompt_len - 1 : -1]
    targets = ids[:, prompt_len:]
    log_prob = torch.log_softmax(logits.float() / temperature, dim=-1).gather(-1, targets.unsqueeze(-1)).squeeze(-1)
    return ResponseOutput(log_prob=log_prob, logits=logits, hidden=hidden[:, prompt_len - 1 : -1])


def token_entropy(logits: torch.Tensor) -> torch.Tensor:
    """[N, T] entropy of the softmax over the vocabulary."""
    logp = torch.log_softmax(logits, dim=-1)
    return -(logp.exp() * logp).sum(-1)
