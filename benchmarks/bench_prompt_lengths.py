"""Prompt-length check speed: a 17,398-row file in verl's format (DAPO-Math-17k's size) measured under
a chat template, as `validate` and `smoke` do (target: seconds on 2 cores).

Built on the spot, offline: a byte-level BPE tokenizer trained on the synthetic prompts (8,000
tokens, ChatML template; ~1 token per word as a real model's tokenizer has) and prompts of 20-180
words. Prints the wall and CPU time of the first measurement (transformers imported before) and of
a second one (the in-process cache), and the counts under a max_prompt_length.
Usage: python benchmarks/bench_prompt_lengths.py [--rows 17398] [--max-prompt-length 128]
"""

from __future__ import annotations

import argparse
import json
import random
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests" / "backends" / "verl"))


def build(out: Path, rows: int) -> tuple[Path, Path]:
    from tiny_verl import CHATML, SPECIALS
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    from cancelctl.data.parquet_files import write_rows_atomic
    from cancelctl.data.verl_rows import verl_row

    rng = random.Random(0)
    words = ["".join(rng.choice("abcdefghijklmnopqrstuvwxyz") for _ in range(rng.randint(1, 9))) for _ in range(3000)]
    words += list("0123456789+-=()$\\{}")

    def text() -> str:
        return " ".join(rng.choice(words) for _ in range(rng.randint(20, 180)))

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    tok.train_from_iterator([text() for _ in range(3000)], trainers.BpeTrainer(
        vocab_size=8000, special_tokens=list(SPECIALS), initial_alphabet=pre_tokenizers.ByteLevel.alphabet()))
    model = out / "model"
    PreTrainedTokenizerFast(tokenizer_object=tok, eos_token="<|im_end|>", pad_token="<|endoftext|>",
                            chat_template=CHATML).save_pretrained(model)
    (model / "config.json").write_text(json.dumps({"model_type": "qwen2"}))
    data = out / "train.parquet"
    write_rows_atomic([verl_row(data_source="math_dapo", messages=[{"role": "user", "content": text()}], ability="math",
                                ground_truth="1", split="train", index=i, source_id=str(i), question="", entry="{}")
                       for i in range(rows)], data)
    return model, data


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--rows", type=int, default=17398)
    parser.add_argument("--max-prompt-length", type=int, default=128)
    args = parser.parse_args()
    from cancelctl.data.prompt_lengths import prompt_lengths

    with tempfile.TemporaryDirectory() as tmp:
        model, data = build(Path(tmp), args.rows)
        for label in ("first", "cached"):
            wall, cpu = time.perf_counter(), time.process_time()
            measured = prompt_lengths(data, model)
            wall, cpu = time.perf_counter() - wall, time.process_time() - cpu
            print(f"{label}: {measured.prompts:,} rows in {wall:.2f} s wall, {cpu:.2f} s CPU (this process)")
        dropped = measured.dropped(args.max_prompt_length)
        print(f"shortest {measured.shortest}, longest {measured.longest}; {dropped:,} of {measured.prompts:,} over "
              f"max_prompt_length {args.max_prompt_length}")


if __name__ == "__main__":
    main()
