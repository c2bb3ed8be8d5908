"""Will verl keep enough of a run's prompts? Measured before the queue, offline.

verl drops every prompt longer than `data.max_prompt_length` under the model's chat template
(`data.filter_overlong_prompts`, which cancelctl's templates switch on) with nothing but a progress
bar; when it drops them all the run dies a minute in with "num_samples should be a positive integer
value, but got num_samples=0". So `validate` and `smoke` count, per data file, the prompts verl will
keep — with the run's own tokenizer (`model.path`: a folder or its snapshot in the Hugging Face cache,
never the network), chat template, `data.prompt_key` and `data.apply_chat_template_kwargs` as the
rendered config sets them (cancelctl.data.prompt_lengths measures) — and

- refuse a run whose training files keep fewer prompts than one step takes (`budget.prompts_per_step`,
  verl's `data.train_batch_size`), or whose validation files keep none;
- warn with the share dropped otherwise.

verl concatenates the files of `data.train_files` before it filters, so the count is over all of them.
Where the tokenizer, transformers or a data file is not on this machine the check is skipped, and the
reason says so once (a missing data file is `data_problems`' to report).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from cancelctl.spec.run import RunSpec

TRAIN, VAL = "data.train_files", "data.val_files"


@dataclass(frozen=True)
class FileLengths:
    """One data file's prompts against one max_prompt_length."""

    file: str  # as the spec names it
    prompts: int
    kept: int
    shortest: int | None
    longest: int | None

    @property
    def dropped(self) -> int:
        return self.prompts - self.kept


@dataclass(frozen=True)
class PromptLengthCheck:
    """The files of one field (`data.train_files` or `data.val_files`) of a run."""

    field: str
    max_prompt_length: int
    needed: int  # prompts verl must keep: one step's, or one for validation
    files: tuple[FileLengths, ...]
    drops: bool = True  # data.filter_overlong_prompts: verl drops the long ones

    @property
    def prompts(self) -> int:
        return sum(f.prompts for f in self.files)

    @property
    def kept(self) -> int:
        return sum(f.kept for f in self.files)

    @property
    def dropped(self) -> int:
        return self.prompts - self.kept

    @property
    def refused(self) -> bool:
        return self.drops and self.kept < self.needed

    @property
    def split(self) -> str:
        return "train" if self.field == TRAIN else "val"

    def refusal(self) -> str:
        """`data.max_prompt_length`: the files, the prompts kept, the shortest and longest."""
        need = (f"one step takes budget.prompts_per_step = {self.needed:,}" if self.field == TRAIN
                else "validation needs at least one")
        files = "; ".join(f"{f.file}: {f.kept:,} of {f.prompts:,} kept, {_range(f)}" for f in self.files)
        return (f"data.max_prompt_length {self.max_prompt_length:,} keeps {self.kept:,} of {self.prompts:,} {self.split} "
                f"prompts under the model's chat template ({files}): verl drops the rest and {need}; raise "
                f"data.max_prompt_length or shorten the prompts")

    def warning(self) -> str | None:
        """The share dropped, or None when verl keeps every prompt."""
        if not self.dropped:
            return None
        longest = max((f.longest for f in self.files if f.longest is not None), default=None)
        names = ", ".join(f.file for f in self.files if f.dropped)
        what = "verl drops them" if self.drops else "data.filter_overlong_prompts is off: verl does not drop them (data.truncation decides)"
        return (f"{self.split}: {self.dropped:,} of {self.prompts:,} prompts ({100 * self.dropped / self.prompts:.1f}%) "
                f"exceed max_prompt_length {self.max_prompt_length:,} under the model's chat template, longest "
                f"{longest:,}: {what} ({names})")

    def to_json(self) -> dict[str, Any]:
        return {"field": self.field, "max_prompt_length": self.max_prompt_length, "prompts": self.prompts,
                "kept": self.kept, "dropped": self.dropped, "needed": self.needed, "drops": self.drops,
                "refused": self.refused,
                "files": [{"file": f.file, "prompts": f.prompts, "kept": f.kept, "dropped": f.dropped,
                           "shortest": f.shortest, "longest": f.longest} for f in self.files]}


class LengthsSkipped(Exception):
    """Why the prompts of a run could not be measured on this machine (not an error of the spec)."""


def prompt_length_checks(run: RunSpec, *, base: Path | str | None = None, model: str | None = None) -> list[PromptLengthCheck]:
    """The run's training (and validation) files measured; raises LengthsSkipped when the tokenizer,
    transformers or a file is not here. `model`: a folder or hub id standing in for `model.path`
    (smoke --model); `base`: where relative data paths are read from (default: the working directory)."""
    from cancelctl.backends.verl.data_files import absolute
    from cancelctl.models.files import ModelSourceError, model_source

    from cancelctl.data.prompt_lengths import prompt_lengths

    spec = run.spec
    fields = [(TRAIN, spec.data.train_files, spec.budget.prompts_per_step)]
    if spec.data.val_files:
        fields.append((VAL, spec.data.val_files, 1))
    paths = {name: Path(absolute(name, base if base is not None else Path.cwd())) for _, names, _ in fields for name in names}
    for name, path in paths.items():  # a missing file: data_problems names the command that makes it
        if not path.is_file():
            raise LengthsSkipped(f"{name} is not on this machine")
    try:
        tokenizer_dir = model_source(model or spec.model.path)
    except ModelSourceError as exc:
        raise LengthsSkipped(f"model.path: {exc}") from None
    try:
        import transformers  # noqa: F401 - the tokenizer's loader
    except ImportError:
        raise LengthsSkipped("transformers is not installed here (pip install 'cancelctl[model]')") from None
    settings = _data_settings(run)
    max_len = spec.data.max_prompt_length
    checks = []
    for field, names, needed in fields:
        files = []
        for name in names:
            try:
                measured = prompt_lengths(paths[name], tokenizer_dir, prompt_key=settings["prompt_key"],
                                          chat_template_kwargs=settings["chat_template_kwargs"])
            except Exception as exc:  # noqa: BLE001 - a tokenizer or file that does not load: skipped, and why
                raise LengthsSkipped(f"{name} or the tokenizer of {model or spec.model.path} did not load "
                                     f"({type(exc).__name__}: {exc})".splitlines()[0]) from None
            files.append(FileLengths(name, measured.prompts, measured.kept(max_len), measured.shortest, measured.longest))
        checks.append(PromptLengthCheck(field, max_len, needed, tuple(files), settings["drops"]))
    return checks


def _data_settings(run: RunSpec) -> dict[str, Any]:
    """What of verl's `data.*` config the count depends on, as the run's rendered overrides set it
    (verl's defaults otherwise: prompt_key `prompt`, no template arguments, filter_overlong_prompts off)."""
    from cancelctl.backends.verl.render import render_override_set

    try:
        settings = render_override_set(run).settings
    except Exception:  # noqa: BLE001 - a spec that does not render is the compose layer's to report
        settings = {}

    def value(key: str, default: Any) -> Any:
        setting = settings.get(key)
        return default if setting is None or setting.value is None else setting.value

    return {"prompt_key": value("data.prompt_key", "prompt"),
            "chat_template_kwargs": dict(value("data.apply_chat_template_kwargs", {}) or {}),
            "drops": bool(value("data.filter_overlong_prompts", False))}


def _range(f: FileLengths) -> str:
    if f.longest is None:
        return "no prompt renders under the chat template"
    return f"shortest {f.shortest:,}, longest {f.longest:,} tokens"


def measure_runs(runs: list[RunSpec], *, base: Path | str | None = None,
                 model: str | None = None) -> tuple[dict[str, list[PromptLengthCheck]], str]:
    """Each verl run's checks by run_id (runs that differ only in what the count ignores are measured
    once), and why some were not measured ('' when all were) — the first reason, said once."""
    by_key: dict[tuple, list[PromptLengthCheck] | None] = {}
    out: dict[str, list[PromptLengthCheck]] = {}
    skipped = ""
    for run in runs:
        if run.spec.backend != "verl":
            continue
        spec = run.spec
        key = (model or spec.model.path, spec.model.template, spec.model.strategy, tuple(spec.data.train_files),
               tuple(spec.data.val_files), spec.data.max_prompt_length, spec.budget.prompts_per_step)
        if key not in by_key:
            try:
                by_key[key] = prompt_length_checks(run, base=base, model=model)
            except LengthsSkipped as exc:
                by_key[key] = None
                skipped = skipped or f"prompt lengths not measured: {exc}"
        if by_key[key] is not None:
            out[run.run_id] = by_key[key]
    return out, skipped
