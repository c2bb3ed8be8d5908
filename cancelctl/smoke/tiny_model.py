"""The smoke's model: a tiny random model of the user's architecture family, with the user's own
tokenizer and chat template.

What a smoke must catch lives in the model's *files* — the architecture verl and the CPU rollout
load, the tokenizer that renders every prompt, its chat template and special tokens — not in the
weights. So the model's config.json is read from disk or the Hugging Face cache (never the
network), shrunk to two small layers, and saved with fresh random weights next to the tokenizer
files, once per source (a content hash names the folder). The vocabulary keeps its size: the
tokenizer's ids must stay valid.
"""

from __future__ import annotations

import hashlib
import json
import shutil
from pathlib import Path

from cancelctl.models.files import CONFIG_FILE, TOKENIZER_FILES, ModelSourceError, model_source

__all__ = ["CONFIG_FILE", "TOKENIZER_FILES", "ModelSourceError", "chat_template_problem", "model_source", "tiny_config",
           "tiny_model"]

# The shrunk sizes: two layers of width 64, whatever the family calls them.
TINY_SIZES = {
    "num_hidden_layers": 2, "n_layer": 2, "num_layers": 2,
    "hidden_size": 64, "n_embd": 64, "d_model": 64,
    "intermediate_size": 128, "n_inner": 128, "ffn_dim": 128,
    "num_attention_heads": 4, "n_head": 4,
    "num_key_value_heads": 2, "head_dim": 16,
    "num_experts": 4, "num_local_experts": 4, "num_experts_per_tok": 2, "moe_intermediate_size": 64,
    "shared_expert_intermediate_size": 64,
}
# The attention of a tiny model vLLM loads on CPU: 2 heads of 32 (its CPU attention refuses head sizes
# below 32), 1 KV head (grouped as the 4-over-2 default is), the width of TINY_SIZES kept.
VLLM_ATTENTION = {"num_attention_heads": 2, "n_head": 2, "num_key_value_heads": 1, "head_dim": 32}


def chat_template_problem(source: Path) -> str | None:
    """Why verl could not render a chat prompt with this tokenizer, or None. verl applies the chat
    template to every row's `prompt` (RLHFDataset), so a base model's tokenizer without one fails there."""
    from transformers import AutoTokenizer

    try:
        tokenizer = AutoTokenizer.from_pretrained(source)
    except Exception as exc:  # noqa: BLE001 - the loader's own words are the cause
        return f"tokenizer of {source} does not load: {type(exc).__name__}: {exc}".splitlines()[0]
    if not getattr(tokenizer, "chat_template", None):
        return (f"tokenizer of {source} has no chat template: verl renders every prompt with it "
                f"(add one to tokenizer_config.json or chat_template.jinja, or use the instruct model's tokenizer)")
    return None


def source_hash(source: Path) -> str:
    digest = hashlib.sha256()
    for name in (CONFIG_FILE, *TOKENIZER_FILES):
        file = source / name
        if file.is_file():
            digest.update(name.encode())
            digest.update(file.read_bytes())
    return digest.hexdigest()[:12]


def tiny_config(config: dict, *, vllm: bool = False, tokenizer_size: int | None = None) -> dict:
    """`config` (a config.json) with every size it names set to TINY_SIZES (and VLLM_ATTENTION with `vllm`,
    the vocabulary cut to `tokenizer_size` where it is larger: module docstring); per-layer lists cut to two."""
    tiny = dict(config)
    for key, value in {**TINY_SIZES, **(VLLM_ATTENTION if vllm else {})}.items():
        if key in tiny:
            tiny[key] = value
    if vllm and tokenizer_size and tiny.get("vocab_size", 0) > tokenizer_size:
        tiny["vocab_size"] = tokenizer_size
    for key, value in config.items():  # e.g. Qwen3's layer_types, one entry per layer
        if isinstance(value, list) and len(value) == config.get("num_hidden_layers"):
            tiny[key] = value[:2]
    tiny.pop("quantization_config", None)
    tiny["torch_dtype"] = tiny["dtype"] = "float32"
    return tiny


def tiny_model(source: Path, cache_dir: Path, *, vllm: bool = False) -> Path:
    """A folder with a tiny random model of `source`'s family and `source`'s tokenizer files (made once
    per source and shape under `cache_dir`; a half-written folder is never used). `vllm`: the attention
    verl's vLLM rollout on CPU accepts (VLLM_ATTENTION)."""
    out = Path(cache_dir) / f"tiny-{'vllm-' if vllm else ''}{source_hash(source)}"
    if (out / "model.safetensors").is_file():
        return out
    import torch
    from transformers import AutoConfig, AutoModelForCausalLM, AutoTokenizer

    staging = out.with_name(out.name + ".partial")
    shutil.rmtree(staging, ignore_errors=True)
    staging.mkdir(parents=True)
    for name in TOKENIZER_FILES:
        if (source / name).is_file():
            shutil.copyfile(source / name, staging / name)
    tokenizer_size = len(AutoTokenizer.from_pretrained(source)) if vllm else None
    config_dict = tiny_config(json.loads((source / CONFIG_FILE).read_text(encoding="utf-8")), vllm=vllm,
                              tokenizer_size=tokenizer_size)
    (staging / CONFIG_FILE).write_text(json.dumps(config_dict, indent=2), encoding="utf-8")
    config = AutoConfig.from_pretrained(staging)
    torch.manual_seed(0)
    model = AutoModelForCausalLM.from_config(config, dtype=torch.float32)
    model.save_pretrained(staging, safe_serialization=True)
    for name in TOKENIZER_FILES:  # save_pretrained may rewrite generation_config.json: the source's wins
        if (source / name).is_file():
            shutil.copyfile(source / name, staging / name)
    shutil.rmtree(out, ignore_errors=True)
    staging.rename(out)
    return out
