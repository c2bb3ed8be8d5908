"""A model's shape for the GPU-memory estimate (`memory`): its config.json, read offline, as the
numbers the formulas take — widths, depth, heads, vocabulary, experts — and its parameter count.

config.json is found as the smoke and the prompt-length check find a model's small files
(`cancelctl.models.files`): `model.path` as a folder here, or the model's snapshot in the Hugging Face
cache; never the network.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any


class MemorySkipped(Exception):
    """Why a run's memory could not be estimated on this machine (not an error of the spec)."""


# Architectures whose MLP is two matrices (fc1, act, fc2); the rest gate (SwiGLU: gate, up, down).
NON_GATED = {"gpt2", "gpt_neox", "gptj", "opt", "bloom", "phi", "falcon", "starcoder2", "gpt_bigcode"}


@dataclass(frozen=True)
class ModelShape:
    """A decoder-only transformer as its config.json describes it (MoE: `experts` > 1)."""

    hidden: int
    layers: int
    heads: int
    kv_heads: int
    head_dim: int
    intermediate: int  # the MLP's width; of one expert in an MoE
    vocab: int
    tied_embeddings: bool = False
    gated_mlp: bool = True
    qkv_bias: bool = False
    experts: int = 1
    experts_per_token: int = 1
    shared_intermediate: int = 0  # an always-on shared expert's width (Qwen2-MoE)

    @classmethod
    def from_config(cls, config: dict[str, Any]) -> ModelShape:
        """From a Hugging Face config.json (a multimodal one's `text_config`); ValueError names what is missing."""
        if "text_config" in config and not _first(config, "hidden_size", "n_embd", "d_model"):
            config = {**config, **config["text_config"]}
        hidden = _first(config, "hidden_size", "n_embd", "d_model")
        layers = _first(config, "num_hidden_layers", "n_layer", "num_layers")
        heads = _first(config, "num_attention_heads", "n_head")
        vocab = _first(config, "vocab_size")
        missing = [name for name, v in (("hidden_size", hidden), ("num_hidden_layers", layers),
                                        ("num_attention_heads", heads), ("vocab_size", vocab)) if not v]
        if missing:
            raise ValueError(f"config.json has no {', '.join(missing)}")
        experts = _first(config, "num_experts", "num_local_experts", "n_routed_experts") or 1
        dense = _first(config, "intermediate_size", "n_inner", "ffn_dim", "ffn_hidden_size") or 4 * hidden
        model_type = str(config.get("model_type", ""))
        return cls(
            hidden=hidden, layers=layers, heads=heads,
            kv_heads=_first(config, "num_key_value_heads", "multi_query_group_num") or heads,
            head_dim=_first(config, "head_dim") or hidden // heads,
            intermediate=(_first(config, "moe_intermediate_size") or dense) if experts > 1 else dense,
            vocab=vocab,
            tied_embeddings=bool(config.get("tie_word_embeddings", False)),  # absent: count lm_head (the larger)
            gated_mlp=model_type not in NON_GATED,
            qkv_bias=model_type.startswith("qwen2") or bool(config.get("attention_bias", False)),
            experts=experts,
            experts_per_token=(_first(config, "num_experts_per_tok", "moe_topk") or 1) if experts > 1 else 1,
            shared_intermediate=_first(config, "shared_expert_intermediate_size") or 0,
        )

    @property
    def kv_width(self) -> int:
        return self.kv_heads * self.head_dim

    @property
    def q_width(self) -> int:
        return self.heads * self.head_dim

    @property
    def mlp_matrices(self) -> int:
        return 3 if self.gated_mlp else 2

    @property
    def layer_params(self) -> int:
        """q, k, v, o (+ q/k/v biases), the MLP (every expert, the shared one, the router), 2 norms."""
        h = self.hidden
        attention = h * self.q_width + 2 * h * self.kv_width + self.q_width * h
        if self.qkv_bias:
            attention += self.q_width + 2 * self.kv_width
        mlp = self.mlp_matrices * h * (self.intermediate * self.experts + self.shared_intermediate)
        router = h * self.experts if self.experts > 1 else 0
        return attention + mlp + router + 2 * h

    @property
    def expert_params(self) -> int:
        """The routed experts' weights (an MoE's bulk; what expert parallel splits); 0 for a dense model."""
        return self.layers * self.mlp_matrices * self.hidden * self.intermediate * self.experts if self.experts > 1 else 0

    @property
    def embedding_params(self) -> int:
        return self.vocab * self.hidden

    @property
    def params(self) -> int:
        """All parameters: layers, the embedding, lm_head unless tied, the final norm."""
        heads = 1 if self.tied_embeddings else 2
        return self.layers * self.layer_params + heads * self.embedding_params + self.hidden

    @property
    def active_intermediate(self) -> int:
        """MLP width a token passes through: its top-k experts and the shared one."""
        return self.intermediate * self.experts_per_token + self.shared_intermediate


def _first(config: dict[str, Any], *names: str) -> Any:
    return next((config[n] for n in names if config.get(n) is not None), None)


def model_config(path: str) -> dict[str, Any]:
    """The model's config.json, offline: a folder here, or the model's snapshot in the Hugging Face cache
    (its `refs/main` read directly; `models.files.model_source` otherwise): a model that is not cached
    costs a stat, a cached one no huggingface_hub import."""
    from cancelctl.models.files import CONFIG_FILE, ModelSourceError, model_source

    local = Path(path).expanduser()
    cached = None if local.is_dir() else _hub_cache_dir(path)
    if not local.is_dir() and not cached.is_dir():
        raise MemorySkipped(f"model.path {path!r} is neither a folder here nor in the Hugging Face cache "
                            f"(fetch its config once: `hf download {path} {CONFIG_FILE}`)")
    try:
        if cached is not None and (ref := cached / "refs" / "main").is_file():
            snapshot = cached / "snapshots" / ref.read_text().strip() / CONFIG_FILE
            if snapshot.is_file():
                return json.loads(snapshot.read_text())
        return json.loads((model_source(path) / CONFIG_FILE).read_text())
    except (ModelSourceError, OSError, ValueError) as exc:
        raise MemorySkipped(f"model.path: {exc}".splitlines()[0]) from None


def _hub_cache_dir(repo_id: str) -> Path:
    """Where the Hugging Face cache keeps `repo_id` (huggingface_hub's constants, without importing it)."""
    env = os.environ
    cache = env.get("HF_HUB_CACHE") or env.get("HUGGINGFACE_HUB_CACHE") or os.path.join(
        env.get("HF_HOME") or os.path.join(env.get("XDG_CACHE_HOME") or os.path.expanduser("~/.cache"), "huggingface"), "hub")
    return Path(cache, "models--" + repo_id.replace("/", "--"))
