"""A model's small files on this machine — its config.json and tokenizer — found offline: a local
folder, or the model's snapshot in the Hugging Face cache. Nothing is downloaded. The smoke builds its
tiny model from them and `validate` measures the data's prompts with their tokenizer."""

from __future__ import annotations

from pathlib import Path

# Small files a model repo keeps its architecture and tokenizer in.
CONFIG_FILE = "config.json"
TOKENIZER_FILES = (
    "tokenizer.json", "tokenizer_config.json", "special_tokens_map.json", "tokenizer.model", "vocab.json",
    "merges.txt", "added_tokens.json", "chat_template.jinja", "chat_template.json", "generation_config.json",
)


class ModelSourceError(ValueError):
    """The user's model files are not on this machine: the message says how to get them."""


def model_source(path: str) -> Path:
    """The folder holding `path`'s config.json and tokenizer: `path` itself when it is a local folder,
    else its snapshot in the Hugging Face cache. Offline: nothing is downloaded."""
    local = Path(path).expanduser()
    if local.is_dir():
        if not (local / CONFIG_FILE).is_file():
            raise ModelSourceError(f"{local} has no {CONFIG_FILE}: not a Hugging Face model folder")
        return local
    try:
        from huggingface_hub import snapshot_download

        cached = Path(snapshot_download(path, allow_patterns=[CONFIG_FILE, *TOKENIZER_FILES], local_files_only=True))
    except Exception as exc:  # noqa: BLE001 - not cached, a bad repo id, or hub not installed: one answer
        raise ModelSourceError(
            f"model {path!r} is neither a folder here nor in the Hugging Face cache ({type(exc).__name__}); fetch its "
            f"small files once: `hf download {path} {CONFIG_FILE} tokenizer.json tokenizer_config.json`, or pass "
            f"--model DIR (a folder with {CONFIG_FILE} and the tokenizer)"
        ) from None
    if not (cached / CONFIG_FILE).is_file():
        raise ModelSourceError(f"the Hugging Face cache holds no {CONFIG_FILE} of {path!r}: `hf download {path} {CONFIG_FILE}`")
    return cached
