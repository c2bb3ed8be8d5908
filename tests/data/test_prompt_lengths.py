"""Prompt lengths as verl counts them: the chat template with the generation prompt, encoded without
special tokens; a row whose template raises counts as too long (verl drops it)."""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from cancelctl.data.prompt_lengths import UNRENDERABLE, prompt_lengths

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "backends" / "verl"))

# the tokenizer needs transformers, which the verl extra brings: CI runs these with `pytest -m verl`
pytestmark = pytest.mark.verl

# ChatML around one user message: <|im_start|> "user\n" … <|im_end|> "\n" <|im_start|> "assistant\n"
CHATML_TOKENS = 1 + 5 + 1 + 1 + 1 + 10


@pytest.fixture(scope="module")
def tokenizer_dir(tmp_path_factory):
    """A byte-level tokenizer (one token per byte) with a ChatML template, and a config.json."""
    pytest.importorskip("transformers")
    from tiny_verl import build_tokenizer

    path = tmp_path_factory.mktemp("model")
    build_tokenizer(path)
    (path / "config.json").write_text(json.dumps({"model_type": "qwen2"}))
    return path


def write_prompts(path: Path, contents: list) -> Path:
    messages = pa.list_(pa.struct([("role", pa.string()), ("content", pa.string())]))
    prompts = [None if c is None else [{"role": "user", "content": c}] for c in contents]
    pq.write_table(pa.table({"prompt": pa.array(prompts, messages)}), path)
    return path


def test_each_rows_length_is_verls_count_under_the_chat_template(tokenizer_dir, tmp_path):
    from transformers import AutoTokenizer

    contents = ["hi", "x" * 40, "héllo wörld", "a\nb"]
    path = write_prompts(tmp_path / "train.parquet", contents)
    measured = prompt_lengths(path, tokenizer_dir)
    assert measured.lengths == tuple(len(c.encode()) + CHATML_TOKENS for c in contents)
    tokenizer = AutoTokenizer.from_pretrained(tokenizer_dir)  # verl's own count, one row at a time
    for content, length in zip(contents, measured.lengths):
        ids = tokenizer.apply_chat_template([{"role": "user", "content": content}], add_generation_prompt=True,
                                            tokenize=True, return_dict=False)
        assert len(ids) == length
    assert (measured.shortest, measured.longest) == (2 + CHATML_TOKENS, 40 + CHATML_TOKENS)
    assert measured.kept(21 + CHATML_TOKENS) == 3 and measured.dropped(21 + CHATML_TOKENS) == 1


def test_a_row_whose_template_fails_is_dropped_like_verl_drops_it(tokenizer_dir, tmp_path):
    path = write_prompts(tmp_path / "train.parquet", ["ok", None, "fine"])
    measured = prompt_lengths(path, tokenizer_dir)
    assert measured.lengths[1] == UNRENDERABLE and measured.unrenderable == 1
    assert measured.kept(10**6) == 2 and measured.shortest == 2 + CHATML_TOKENS


def test_the_template_arguments_and_the_prompt_column_are_the_runs(tokenizer_dir, tmp_path):
    model = tmp_path / "model"
    model.mkdir()
    for file in tokenizer_dir.iterdir():
        (model / file.name).write_bytes(file.read_bytes())
    config = json.loads((model / "tokenizer_config.json").read_text())
    config["chat_template"] = "{% if think %}<think>{% endif %}{{ messages[0]['content'] }}"
    (model / "tokenizer_config.json").write_text(json.dumps(config))
    (model / "chat_template.jinja").unlink(missing_ok=True)
    path = tmp_path / "train.parquet"
    messages = pa.list_(pa.struct([("role", pa.string()), ("content", pa.string())]))
    pq.write_table(pa.table({"question": pa.array([[{"role": "user", "content": "abc"}]], messages)}), path)
    assert prompt_lengths(path, model, prompt_key="question").lengths == (3,)
    assert prompt_lengths(path, model, prompt_key="question", chat_template_kwargs={"think": True}).lengths == (10,)


def test_a_changed_file_is_measured_again(tokenizer_dir, tmp_path):
    path = write_prompts(tmp_path / "train.parquet", ["a"])
    assert prompt_lengths(path, tokenizer_dir).prompts == 1
    write_prompts(path, ["a", "bb"])
    os.utime(path, ns=(path.stat().st_atime_ns, path.stat().st_mtime_ns + 10**9))
    assert prompt_lengths(path, tokenizer_dir).prompts == 2
