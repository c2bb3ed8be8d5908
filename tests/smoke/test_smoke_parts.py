"""The smoke's model, data and reward checks, each on its own (no verl run)."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

from cancelctl.smoke.first_rows import first_rows
from cancelctl.smoke.reward_check import reward_problem
from cancelctl.smoke.tiny_model import ModelSourceError, chat_template_problem, model_source, tiny_config, tiny_model

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "backends" / "verl"))


@pytest.fixture(scope="module")
def user_model(tmp_path_factory):
    pytest.importorskip("transformers")
    from tiny_verl import build_model

    path = tmp_path_factory.mktemp("user") / "model"
    build_model(path)
    return path


def test_a_qwen3_config_shrinks_to_two_small_layers_and_keeps_its_vocabulary():
    config = {"model_type": "qwen3", "num_hidden_layers": 36, "hidden_size": 2560, "intermediate_size": 9728,
              "num_attention_heads": 32, "num_key_value_heads": 8, "head_dim": 128, "vocab_size": 151936,
              "layer_types": ["full_attention"] * 36, "max_window_layers": 36, "torch_dtype": "bfloat16"}
    tiny = tiny_config(config)
    assert (tiny["num_hidden_layers"], tiny["hidden_size"], tiny["head_dim"]) == (2, 64, 16)
    assert tiny["layer_types"] == ["full_attention"] * 2 and tiny["vocab_size"] == 151936
    assert tiny["torch_dtype"] == "float32" and config["num_hidden_layers"] == 36  # the source is untouched


def test_a_tiny_model_for_vllm_has_two_heads_of_32_and_the_same_width():
    """vLLM's CPU attention refuses head sizes below 32 (the default tiny shape's are 16)."""
    config = {"model_type": "qwen3", "num_hidden_layers": 36, "hidden_size": 2560, "num_attention_heads": 32,
              "num_key_value_heads": 8, "head_dim": 128, "vocab_size": 151936}
    tiny = tiny_config(config, vllm=True)
    assert (tiny["hidden_size"], tiny["num_attention_heads"], tiny["num_key_value_heads"], tiny["head_dim"]) == (64, 2, 1, 32)
    derived = tiny_config({"model_type": "qwen2", "hidden_size": 896, "num_attention_heads": 14,
                           "num_key_value_heads": 2, "vocab_size": 151936}, vllm=True)
    assert derived["hidden_size"] // derived["num_attention_heads"] == 32 and "head_dim" not in derived
    gpt2 = tiny_config({"model_type": "gpt2", "n_embd": 768, "n_head": 12, "vocab_size": 50257}, vllm=True)
    assert gpt2["n_embd"] // gpt2["n_head"] == 32


def test_a_tiny_model_for_vllm_has_no_ids_past_its_tokenizers():
    """verl masks ids past len(tokenizer) out of vLLM's sampling: a random model gives them 1/vocab each, a
    gap to the trainer the gate would refuse; the hf_cpu tiny model keeps the vocabulary as it is."""
    qwen = {"model_type": "qwen3", "vocab_size": 151936, "num_attention_heads": 32}
    assert tiny_config(qwen, vllm=True, tokenizer_size=151665)["vocab_size"] == 151665
    assert tiny_config(qwen, tokenizer_size=151665)["vocab_size"] == 151936
    assert tiny_config(qwen, vllm=True, tokenizer_size=152000)["vocab_size"] == 151936  # never grown


def test_the_vllm_tiny_model_is_a_folder_of_its_own(user_model, tmp_path):
    from transformers import AutoConfig

    plain, vllm = tiny_model(model_source(str(user_model)), tmp_path), tiny_model(model_source(str(user_model)), tmp_path, vllm=True)
    assert plain != vllm and vllm.name.startswith("tiny-vllm-")
    assert (AutoConfig.from_pretrained(plain).num_attention_heads, AutoConfig.from_pretrained(vllm).num_attention_heads) == (4, 2)
    assert AutoConfig.from_pretrained(vllm).hidden_size == AutoConfig.from_pretrained(plain).hidden_size == 64
    assert (AutoConfig.from_pretrained(plain).vocab_size, AutoConfig.from_pretrained(vllm).vocab_size) == (260, 259)


def test_the_tiny_model_has_the_users_family_and_tokenizer_and_is_made_once(user_model, tmp_path):
    from transformers import AutoConfig, AutoModelForCausalLM, AutoTokenizer

    made = tiny_model(model_source(str(user_model)), tmp_path)
    assert AutoConfig.from_pretrained(made).model_type == AutoConfig.from_pretrained(user_model).model_type
    assert AutoModelForCausalLM.from_pretrained(made).config.num_hidden_layers == 2
    ours, theirs = AutoTokenizer.from_pretrained(made), AutoTokenizer.from_pretrained(user_model)
    assert ours.chat_template == theirs.chat_template and ours.encode("2 + 3 = ?") == theirs.encode("2 + 3 = ?")
    stamp = (made / "model.safetensors").stat().st_mtime_ns
    assert tiny_model(model_source(str(user_model)), tmp_path) == made
    assert (made / "model.safetensors").stat().st_mtime_ns == stamp


def test_a_tokenizer_without_chat_template_is_named(user_model, tmp_path):
    import shutil

    bare = tmp_path / "bare"
    shutil.copytree(user_model, bare)
    (bare / "chat_template.jinja").unlink(missing_ok=True)
    config = json.loads((bare / "tokenizer_config.json").read_text())
    config.pop("chat_template", None)
    (bare / "tokenizer_config.json").write_text(json.dumps(config))
    assert chat_template_problem(user_model) is None
    assert "no chat template" in chat_template_problem(bare)


def test_a_model_neither_here_nor_cached_says_how_to_get_its_small_files(tmp_path, monkeypatch):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "empty-cache"))
    with pytest.raises(ModelSourceError, match="hf download org/model config.json"):
        model_source("org/model")
    with pytest.raises(ModelSourceError, match="no config.json"):
        model_source(str(tmp_path))


def test_first_rows_keep_the_columns_and_the_dataset_layout(tmp_path):
    import pandas as pd

    from cancelctl.data.layout import dataset_for_path

    source = tmp_path / "data" / "chain_sum" / "train.parquet"
    source.parent.mkdir(parents=True)
    rows = [{"data_source": "reasoning_gym/chain_sum", "prompt": [{"role": "user", "content": str(i)}],
             "reward_model": {"ground_truth": str(i)}} for i in range(10)]
    pd.DataFrame(rows).to_parquet(source)
    copy = first_rows(source, tmp_path / "smoke", 0, 3)
    assert Path(copy).parts[-2:] == ("chain_sum", "train.parquet") and dataset_for_path(copy) is not None
    back = pd.read_parquet(copy)
    assert list(back.columns) == list(pd.read_parquet(source).columns) and back["reward_model"].tolist() == [
        r["reward_model"] for r in rows[:3]]


@pytest.mark.parametrize("body,problem", [
    ("return None", "returned None"),
    ("return 'yes'", "returned 'yes'"),
    ("return float('nan')", "returned nan"),
    ("raise KeyError('answer')", "raised on row 0 (KeyError"),
    ("return 1.0", None),
    ("return {'score': 0.5, 'acc': True}", None),
])
def test_the_reward_is_called_on_the_first_rows_and_a_non_number_is_named(tmp_path, body, problem):
    import pandas as pd

    data = tmp_path / "train.parquet"
    pd.DataFrame([{"data_source": "x", "reward_model": {"ground_truth": "4"}, "extra_info": {"i": 0}}]).to_parquet(data)
    reward = tmp_path / "reward.py"
    reward.write_text(f"def score(data_source, solution_str, ground_truth, extra_info=None):\n    {body}\n")
    found = reward_problem(f"{reward}:score", False, str(data))
    assert found is None if problem is None else problem in found and "reward.py:score" in found


def test_a_reward_file_that_does_not_import_is_named(tmp_path):
    reward = tmp_path / "broken.py"
    reward.write_text("import not_a_module_anywhere\n")
    assert "does not load: ModuleNotFoundError" in reward_problem(str(reward), False, str(tmp_path / "unread.parquet"))
