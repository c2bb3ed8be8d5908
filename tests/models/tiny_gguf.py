"""A tiny llama-architecture GGUF written with the `gguf` package, shaped like SmolLM2's file: a byte-level
BPE ("gpt2") tokenizer with ChatML specials (bos <|im_start|> 1, eos/pad <|im_end|> 2), a chat
template, fp32 tensors. Its embeddings make EOS the greedy first token, so a check that a reply ends at
EOS can pass on random weights."""

from __future__ import annotations

import zipfile
from pathlib import Path

import gguf
import numpy as np

def bytes_to_unicode() -> list[str]:
    """GPT-2's byte-to-symbol alphabet (what a byte-level BPE vocabulary starts from)."""
    bs = list(range(ord("!"), ord("~") + 1)) + list(range(ord("¡"), ord("¬") + 1)) + list(range(ord("®"), ord("ÿ") + 1))
    cs = bs[:]
    n = 0
    for b in range(256):
        if b not in bs:
            bs.append(b)
            cs.append(256 + n)
            n += 1
    return [chr(c) for c in cs]


def write_tiny_gguf(path: Path, *, eos: int = 2, hidden: int = 16, layers: int = 1, heads: int = 2, ffn: int = 32, seed: int = 0) -> Path:
    specials = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]
    tokens = specials + bytes_to_unicode() + ["Ġt", "he"]
    vocab = len(tokens)
    w = gguf.GGUFWriter(str(path), "llama")
    w.add_context_length(64)
    w.add_embedding_length(hidden)
    w.add_block_count(layers)
    w.add_feed_forward_length(ffn)
    w.add_head_count(heads)
    w.add_head_count_kv(heads)
    w.add_layer_norm_rms_eps(1e-5)
    w.add_rope_freq_base(10000.0)
    w.add_vocab_size(vocab)
    w.add_tokenizer_model("gpt2")
    w.add_tokenizer_pre("default")
    w.add_token_list(tokens)
    w.add_token_types([3] * 3 + [1] * (vocab - 3))
    w.add_token_merges(["Ġ t", "h e"])  # one merge reads back as a string
    w.add_bos_token_id(1)
    w.add_eos_token_id(eos)
    w.add_pad_token_id(2)
    w.add_unk_token_id(0)
    w.add_chat_template("{% for m in messages %}<|im_start|>{{ m['role'] }}\n{{ m['content'] }}<|im_end|>\n{% endfor %}{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}")
    rng = np.random.default_rng(seed)

    def t(*shape):
        return (rng.standard_normal(shape) * 0.02).astype(np.float32)

    embeddings = (rng.standard_normal((vocab, hidden)) * 0.2).astype(np.float32)
    embeddings[:, 0] = 3.0  # every hidden state leans on dimension 0 ...
    embeddings[eos] = 0.0
    embeddings[eos, 0] = 12.0  # ... so the tied output layer favours EOS
    w.add_tensor("token_embd.weight", embeddings)
    w.add_tensor("output_norm.weight", np.ones(hidden, np.float32))
    for i in range(layers):
        p = f"blk.{i}."
        w.add_tensor(p + "attn_norm.weight", np.ones(hidden, np.float32))
        for n in ("attn_q", "attn_k", "attn_v", "attn_output"):
            w.add_tensor(p + n + ".weight", t(hidden, hidden))
        w.add_tensor(p + "ffn_norm.weight", np.ones(hidden, np.float32))
        w.add_tensor(p + "ffn_gate.weight", t(ffn, hidden))
        w.add_tensor(p + "ffn_up.weight", t(ffn, hidden))
        w.add_tensor(p + "ffn_down.weight", t(hidden, ffn))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return path


def write_wheel(path: Path, member: str, gguf_file: Path) -> Path:
    """A wheel-shaped zip holding `gguf_file` at `member` (all `model prepare` reads of a wheel)."""
    with zipfile.ZipFile(path, "w") as archive:
        archive.write(gguf_file, member)
        archive.writestr(member.split("/")[0] + "/__init__.py", "raise ImportError('never imported')\n")
    return path

