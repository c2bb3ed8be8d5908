"""How long each prompt of a data file is, in tokens, under a model's chat template — as verl counts it.

verl's RLHFDataset keeps a row only when (data.filter_overlong_prompts)

    len(tokenizer.apply_chat_template(row[data.prompt_key], add_generation_prompt=True,
                                      **data.apply_chat_template_kwargs)) <= data.max_prompt_length

and a row whose template raises counts as too long (verl/utils/dataset/rl_dataset.py,
`maybe_filter_out_long_prompts`). `apply_chat_template` with tokenize=True renders the template to
text and encodes that without special tokens; so does `prompt_lengths`, for all rows at once (the
template rendered per batch, the texts encoded in one batched call of the fast tokenizer): a 17k-row
file takes about a second. Lengths are kept per (file, its mtime and size, tokenizer folder and its
files' hash, template arguments) for the process's life, so a sweep naming one file many times reads
it once. transformers is imported only here, when a length is measured.
"""

from __future__ import annotations

import functools
import hashlib
import json
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

UNRENDERABLE = -1  # a row whose chat template raised: verl drops it as too long
RENDER_BATCH = 512


@dataclass(frozen=True)
class PromptLengths:
    """Each row's templated prompt length (UNRENDERABLE where the template raised), in file order."""

    lengths: tuple[int, ...]

    @property
    def prompts(self) -> int:
        return len(self.lengths)

    def kept(self, max_prompt_length: int) -> int:
        """Rows verl keeps: renderable and at most `max_prompt_length` tokens."""
        return sum(0 <= n <= max_prompt_length for n in self.lengths)

    def dropped(self, max_prompt_length: int) -> int:
        return self.prompts - self.kept(max_prompt_length)

    @property
    def shortest(self) -> int | None:
        return min((n for n in self.lengths if n >= 0), default=None)

    @property
    def longest(self) -> int | None:
        return max(self.lengths, default=None) if any(n >= 0 for n in self.lengths) else None

    @property
    def unrenderable(self) -> int:
        return sum(n == UNRENDERABLE for n in self.lengths)


def prompt_lengths(data_file: Path | str, tokenizer_dir: Path | str, *, prompt_key: str = "prompt",
                   chat_template_kwargs: Mapping[str, Any] | None = None) -> PromptLengths:
    """Every row's prompt length in `data_file` (parquet) under the tokenizer in folder `tokenizer_dir`
    (loaded from disk only). Raises OSError / ValueError for a file or tokenizer that cannot be read."""
    data_file, tokenizer_dir = Path(data_file), Path(tokenizer_dir)
    stat = data_file.stat()
    kwargs = json.dumps(dict(chat_template_kwargs or {}), sort_keys=True, default=str)
    return _measured(str(data_file.resolve()), stat.st_mtime_ns, stat.st_size, str(tokenizer_dir.resolve()),
                     _folder_hash(tokenizer_dir), prompt_key, kwargs)


@functools.lru_cache(maxsize=64)
def _measured(data_file: str, _mtime: int, _size: int, tokenizer_dir: str, _tokenizer_hash: str, prompt_key: str,
              kwargs: str) -> PromptLengths:
    import pyarrow.parquet as pq

    tokenizer = _tokenizer(tokenizer_dir, _tokenizer_hash)
    conversations = pq.read_table(data_file, columns=[prompt_key]).column(prompt_key).to_pylist()
    template_kwargs = json.loads(kwargs)
    texts: list[str | None] = []
    for start in range(0, len(conversations), RENDER_BATCH):
        texts += _render(tokenizer, conversations[start:start + RENDER_BATCH], template_kwargs)
    renderable = [text for text in texts if text is not None]
    encoded = iter(tokenizer(renderable, add_special_tokens=False)["input_ids"] if renderable else [])
    return PromptLengths(tuple(UNRENDERABLE if text is None else len(next(encoded)) for text in texts))


def _render(tokenizer, conversations: list, kwargs: dict) -> list[str | None]:
    """The templated text of each conversation; None where the template raises (a batch at once, row
    by row only when the batch fails)."""
    try:
        if all(isinstance(c, list) and c for c in conversations):
            return list(tokenizer.apply_chat_template(conversations, add_generation_prompt=True, tokenize=False, **kwargs))
    except Exception:  # noqa: BLE001 - some row's template raised: find which, below
        pass
    texts = []
    for conversation in conversations:
        try:
            texts.append(tokenizer.apply_chat_template(conversation, add_generation_prompt=True, tokenize=False, **kwargs))
        except Exception:  # noqa: BLE001 - verl counts it as too long, and so do we
            texts.append(None)
    return texts


@functools.lru_cache(maxsize=8)
def _tokenizer(tokenizer_dir: str, _hash: str):
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(tokenizer_dir, local_files_only=True)


def _folder_hash(folder: Path) -> str:
    """The tokenizer files' names, sizes and mtimes (a changed template or vocabulary is a new key)."""
    digest = hashlib.sha256()
    for file in sorted(folder.iterdir()) if folder.is_dir() else ():
        if file.is_file() and file.suffix in (".json", ".jinja", ".txt", ".model"):
            stat = file.stat()
            digest.update(f"{file.name}:{stat.st_size}:{stat.st_mtime_ns}".encode())
    return digest.hexdigest()[:16]
