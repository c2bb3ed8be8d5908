"""A model's shape for the GPU-memory estimate (`memory`): its config.json, read offline, as the
numbers the formulas take — widths, depth, heads, vocabulary, experts — and its parameter count.

config.json is found as the smoke and the prompt-length check find a model's small files
(`cancelctl.models.files`): `model.path` as a folder here, or the model's snapshot in the Hugging Face
cache; never the network. A file that is not a model's shape (a JSON list, a count written as a string,
a count below 1) is not estimated: `model_shape` says why in one line naming the file.
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
    def from_config(cls, config: Any) -> ModelShape:
        """From a Hugging Face config.json (a multimodal one's `text_config`). ValueError, one line, names
        what is missing or not a shape (a JSON list, a count written as a string, a count below 1):
        such a file is not estimated, never estimated as if it were numbers."""
        if not isinstance(config, dict):
            raise ValueError(f"is a JSON {_json_kind(config)}, not an object of the model's settings")
        if "text_config" in config and not _first(config, "hidden_size", "n_embd", "d_model"):
            if not isinstance(config["text_config"], dict):
                raise ValueError(f"text_config is a JSON {_json_kind(config['text_config'])}, not an object")
            config = {**config, **config["text_config"]}
        hidden = _count(config, "hidden_size", "n_embd", "d_model")
        layers = _count(config, "num_hidden_layers", "n_layer", "num_layers")
        heads = _count(config, "num_attention_heads", "n_head")
        vocab = _count(config, "vocab_size")
        missing = [name for name, v in (("hidden_size", hidden), ("num_hidden_layers", layers),
                                        ("num_attention_heads", heads), ("vocab_size", vocab)) if v is None]
        if missing:
            raise ValueError(f"has no {', '.join(missing)}")
        experts = _count(config, "num_experts", "num_local_experts", "n_routed_experts") or 1
        dense = _count(config, "intermediate_size", "n_inner", "ffn_dim", "ffn_hidden_size") or 4 * hidden
        head_dim = _count(config, "head_dim") or hidden // heads
        if head_dim < 1:
            raise ValueError(f"has no head_dim and hidden_size {hidden} / num_attention_heads {heads} is below 1")
        moe_width = _count(config, "moe_intermediate_size")
        top_k = _count(config, "num_experts_per_tok", "moe_topk")
        if experts > 1 and top_k is not None and top_k > experts:
            raise ValueError(f"routes each token to {top_k} experts (num_experts_per_tok) of {experts}")
        model_type = config.get("model_type", "")
        return cls(
            hidden=hidden, layers=layers, heads=heads,
            kv_heads=_count(config, "num_key_value_heads", "multi_query_group_num") or heads,
            head_dim=head_dim,
            intermediate=(moe_width or dense) if experts > 1 else dense,
            vocab=vocab,
            tied_embeddings=_flag(config, "tie_word_embeddings"),  # absent: count lm_head (the larger)
            gated_mlp=str(model_type) not in NON_GATED,
            qkv_bias=str(model_type).startswith("qwen2") or _flag(config, "attention_bias"),
            experts=experts,
            experts_per_token=(top_k or 1) if experts > 1 else 1,
            shared_intermediate=_count(config, "shared_expert_intermediate_size", minimum=0) or 0,
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


def _count(config: dict[str, Any], *names: str, minimum: int = 1) -> int | None:
    """The first of `names` the config gives, as a count: None when absent, ValueError when it is not a
    whole number (a string, even "2048"; a bool; 2048.5) or is below `minimum`."""
    name = next((n for n in names if config.get(n) is not None), None)
    if name is None:
        return None
    value = config[name]
    if isinstance(value, float) and value.is_integer():
        value = int(value)
    if isinstance(value, bool) or not isinstance(value, int):
        raise ValueError(f"{name} is {_shown(value)}, not a whole number")
    if value < minimum:
        raise ValueError(f"{name} is {value}: a count of at least {minimum}")
    return value


def _flag(config: dict[str, Any], name: str) -> bool:
    value = config.get(name)
    if value is None:
        return False
    if not isinstance(value, bool):
        raise ValueError(f"{name} is {_shown(value)}, not true or false")
    return value


def _shown(value: Any) -> str:
    text = json.dumps(value) if isinstance(value, (str, list, dict)) else str(value).lower() if isinstance(value, bool) else repr(value)
    return f"{_json_kind(value)} {text[:40]}{'…' if len(text) > 40 else ''}"


def _json_kind(value: Any) -> str:
    return {dict: "object", list: "list", str: "string", bool: "boolean", type(None): "null"}.get(type(value), "number")


def model_shape(path: str) -> ModelShape:
    """`path`'s shape from its config.json, offline; MemorySkipped, one line naming the file, when the
    file is not here, is not JSON, or does not describe a transformer (`ModelShape.from_config`)."""
    config, file = model_config_file(path)
    try:
        return ModelShape.from_config(config)
    except ValueError as exc:
        raise MemorySkipped(f"model.path {path!r}: {file} {exc}") from None


def model_config(path: str) -> Any:
    """The model's config.json, parsed (any JSON value: `ModelShape.from_config` judges it)."""
    return model_config_file(path)[0]


def model_config_file(path: str) -> tuple[Any, Path]:
    """The model's config.json, parsed, and the file it was read from, offline: a folder here, or the
    model's snapshot in the Hugging Face cache (its `refs/main` read directly; `models.files.model_source`
    otherwise): a model that is not cached costs a stat, a cached one no huggingface_hub import."""
    from cancelctl.models.files import CONFIG_FILE, ModelSourceError, model_source

    local = Path(path).expanduser()
    cached = None if local.is_dir() else _hub_cache_dir(path)
    if not local.is_dir() and not cached.is_dir():
        raise MemorySkipped(f"model.path {path!r} is neither a folder here nor in the Hugging Face cache "
                            f"(fetch its config once: `hf download {path} {CONFIG_FILE}`)")
    file = None
    try:
        if cached is not None and (ref := cached / "refs" / "main").is_file():
            snapshot = cached / "snapshots" / ref.read_text().strip() / CONFIG_FILE
            if snapshot.is_file():
                file = snapshot
        file = file or model_source(path) / CONFIG_FILE
        return json.loads(file.read_text()), file
    except UnicodeDecodeError:
        raise MemorySkipped(f"model.path {path!r}: {file} is not UTF-8 text") from None
    except json.JSONDecodeError as exc:
        raise MemorySkipped(f"model.path {path!r}: {file} is not JSON ({exc.msg}, line {exc.lineno})") from None
    except (ModelSourceError, OSError, ValueError) as exc:
        raise MemorySkipped(f"model.path: {exc}".splitlines()[0]) from None


def _hub_cache_dir(repo_id: str) -> Path:
    """Where the Hugging Face cache keeps `repo_id` (huggingface_hub's constants, without importing it)."""
    env = os.environ
    cache = env.get("HF_HUB_CACHE") or env.get("HUGGINGFACE_HUB_CACHE") or os.path.join(
        env.get("HF_HOME") or os.path.join(env.get("XDG_CACHE_HOME") or os.path.expanduser("~/.cache"), "huggingface"), "hub")
    return Path(cache, "models--" + repo_id.replace("/", "--"))
