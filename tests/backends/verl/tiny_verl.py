"""Test support: a tiny verl world built on the spot (no download) — model, tokenizer, data, reward.

`build_tiny_verl(out_dir)` writes:
- a random Qwen2 (2 layers, hidden 64, vocab 260) with a byte-level BPE tokenizer: 256 byte symbols
  + <|endoftext|>, <|im_start|>, <|im_end|>, and a ChatML template. transformers 5 loads any qwen2
  checkpoint's tokenizer as Qwen2Tokenizer (byte-level BPE) and verl's agent loop needs "\\n" as one
  token and an <|im_end|> token (QwenContinuousTokenBuilder), so a WordLevel tokenizer would not do;
- train / val parquet files in verl's RLHF format (chat prompt, rule reward, ground truth);
- a reward module with `compute_score(data_source, solution_str, ground_truth, extra_info)`: the
  share of the response's characters that appear in the ground truth (graded, so GRPO groups differ).

`main_ppo_overrides(tiny, out_dir, steps)` gives the Hydra overrides of a small GRPO run on it (on top
of the CPU runtime's, cancelctl.backends.verl.cpu.overrides).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

SPECIALS = ("<|endoftext|>", "<|im_start|>", "<|im_end|>")
VOCAB = 260  # 256 bytes + 3 specials, rounded up
CHATML = (
    "{% for message in messages %}<|im_start|>{{ message['role'] }}\n{{ message['content'] }}<|im_end|>\n"
    "{% endfor %}{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)
PROMPTS_PER_STEP = 8
REWARD_SOURCE = '''\
def compute_score(data_source, solution_str, ground_truth, extra_info=None):
    """Share of the response's characters found in the ground truth."""
    if not solution_str:
        return 0.0
    return sum(c in ground_truth for c in solution_str) / len(solution_str)
'''


@dataclass(frozen=True)
class TinyVerl:
    model: Path
    train: Path
    val: Path
    reward: Path
    reward_name: str = "compute_score"


def build_tokenizer(path: Path):
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    alphabet = sorted(pre_tokenizers.ByteLevel.alphabet())
    tok = Tokenizer(
        models.BPE(vocab={ch: i for i, ch in enumerate(alphabet)}, merges=[])
    )
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    tok.add_special_tokens(list(SPECIALS))
    fast = PreTrainedTokenizerFast(
        tokenizer_object=tok,
        eos_token="<|im_end|>",
        pad_token="<|endoftext|>",
        chat_template=CHATML,
    )
    fast.save_pretrained(path)
    return fast


def build_model(path: Path, num_attention_heads: int = 4, num_key_value_heads: int = 2) -> None:
    """A random Qwen2, hidden 64: head_dim = 64 / num_attention_heads (vLLM's CPU attention needs ≥ 32)."""
    import torch
    from transformers import GenerationConfig, Qwen2Config, Qwen2ForCausalLM

    tok = build_tokenizer(path)
    endoftext, im_end = tok.convert_tokens_to_ids(["<|endoftext|>", "<|im_end|>"])
    config = Qwen2Config(
        vocab_size=VOCAB,
        hidden_size=64,
        intermediate_size=128,
        num_hidden_layers=2,
        num_attention_heads=num_attention_heads,
        num_key_value_heads=num_key_value_heads,
        max_position_embeddings=256,
        tie_word_embeddings=False,
        pad_token_id=endoftext,
        eos_token_id=im_end,
        bos_token_id=endoftext,
    )
    torch.manual_seed(0)
    model = Qwen2ForCausalLM(config)
    model.generation_config = GenerationConfig(
        eos_token_id=[im_end, endoftext], pad_token_id=endoftext
    )
    model.save_pretrained(path)


def _rows(n: int, split: str) -> list[dict]:
    words = ["apple", "river", "stone", "cloud", "maple", "ember", "tiger", "lemon"]
    rows = []
    for i in range(n):
        word = words[i % len(words)]
        rows.append(
            {
                "data_source": "tiny",
                "prompt": [{"role": "user", "content": f"Spell {word} {i}"}],
                "ability": "spelling",
                "reward_model": {"style": "rule", "ground_truth": word},
                "extra_info": {"split": split, "index": i},
            }
        )
    return rows


def build_tiny_verl(out_dir: Path, steps: int = 3, num_attention_heads: int = 4, num_key_value_heads: int = 2) -> TinyVerl:
    """Model, tokenizer, data (PROMPTS_PER_STEP × steps train rows) and reward under out_dir."""
    import pandas as pd

    out_dir = Path(out_dir)
    tiny = TinyVerl(
        model=out_dir / "model",
        train=out_dir / "train.parquet",
        val=out_dir / "val.parquet",
        reward=out_dir / "tiny_reward.py",
    )
    build_model(tiny.model, num_attention_heads, num_key_value_heads)
    pd.DataFrame(_rows(PROMPTS_PER_STEP * steps, "train")).to_parquet(tiny.train)
    pd.DataFrame(_rows(PROMPTS_PER_STEP, "test")).to_parquet(tiny.val)
    tiny.reward.write_text(REWARD_SOURCE)
    return tiny


def main_ppo_overrides(
    tiny: TinyVerl, out_dir: Path, steps: int = 3, group_size: int = 4
) -> list[str]:
    """A small GRPO run: PROMPTS_PER_STEP prompts × group_size, ≤ 16 response tokens, no validation."""
    rows = PROMPTS_PER_STEP * group_size
    return [
        "algorithm.adv_estimator=grpo",
        f"data.train_files={tiny.train}",
        f"data.val_files={tiny.val}",
        f"data.train_batch_size={PROMPTS_PER_STEP}",
        "data.max_prompt_length=64",
        "data.max_response_length=16",
        f"actor_rollout_ref.model.path={tiny.model}",
        f"actor_rollout_ref.actor.ppo_mini_batch_size={PROMPTS_PER_STEP}",
        f"actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu={rows}",
        "actor_rollout_ref.actor.use_kl_loss=False",
        "actor_rollout_ref.actor.optim.lr=1e-3",
        f"actor_rollout_ref.rollout.n={group_size}",
        f"actor_rollout_ref.rollout.log_prob_micro_batch_size_per_gpu={rows}",
        "actor_rollout_ref.rollout.calculate_log_probs=True",
        f"reward.custom_reward_function.path={tiny.reward}",
        f"reward.custom_reward_function.name={tiny.reward_name}",
        "trainer.logger=[console,file]",
        "trainer.project_name=tiny",
        "trainer.experiment_name=cpu",
        f"trainer.default_local_dir={out_dir / 'checkpoints'}",
        f"trainer.total_training_steps={steps}",
        "trainer.val_before_train=False",
        "trainer.test_freq=-1",
        "trainer.save_freq=-1",
    ]
