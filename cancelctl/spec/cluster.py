"""The spec's `cluster:` block: what a run asks the scheduler for, and every value the SLURM executor
writes into the sbatch script — each one line, so a value can never add a directive."""

from __future__ import annotations

import re
import unicodedata
from typing import Annotated, Any, Literal

from pydantic import AfterValidator, Field, ValidationInfo, field_validator, model_serializer, model_validator
from pydantic_core import PydanticCustomError

from cancelctl.spec.strict import Strict, without_defaults


def line_break_in(value: str) -> str | None:
    """The first character of `value` that would end or garble a line of the job script (a line
    break or another control character; a tab is fine), or None."""
    return next((c for c in value if c != "\t" and unicodedata.category(c) in ("Cc", "Zl", "Zp")), None)


def _one_line(value: str) -> str:
    bad = line_break_in(value)
    if bad is not None:
        # a "\n#SBATCH ..." in a value would add a directive to the script: refused, never escaped
        raise PydanticCustomError(
            "one_line", "must be one line without control characters (found {char}): it is written into the sbatch script",
            {"char": repr(bad)},
        )
    return value


def _sbatch_flag(name: str) -> str:
    if not SBATCH_FLAG.match(name):
        raise PydanticCustomError("sbatch_flag", "{name!r} is not an sbatch option name (lower-case letters, digits, '-', '_')",
                                  {"name": name})
    return name


# Every value the SLURM executor writes into an sbatch line, a setup line or an srun argument has
# one of these types, so validate refuses a line break in it with the value's file:line.
ScriptLine = Annotated[str, AfterValidator(_one_line)]
SBATCH_FLAG = re.compile(r"^[a-z][a-z0-9_-]*$")
SbatchFlag = Annotated[str, AfterValidator(_sbatch_flag)]
ScriptValue = Annotated[str | int, AfterValidator(lambda v: _one_line(v) if isinstance(v, str) else v)]


APPTAINER_URI = re.compile(r"^(docker|docker-archive|oras|library|shub|https?)://")


class ClusterSpec(Strict):
    partition: ScriptLine | None = Field(None, description="SLURM partition (sbatch --partition); null: the cluster's default")
    account: ScriptLine | None = Field(None, description="SLURM account charged (sbatch --account); null: the user's default")
    qos: ScriptLine | None = Field(None, description="SLURM quality of service (sbatch --qos); null: the default")
    nodes: int = Field(1, ge=1, description="nodes per run (verl over several: one Ray cluster over the allocation)")
    gpus_per_node: int = Field(0, ge=0, description="GPUs per node the run asks for; 0: none (the lab, verl on cpu)")
    device: Literal["cuda", "cpu"] = Field(
        "cuda",
        description="verl: cuda (GPUs), or cpu: verl's whole loop on CPU cores, one training rank per node, "
        "with cancelctl's CPU platform and Hugging Face rollout (tiny models: tests, smoke runs); requests no GPU",
    )
    gpu_memory_gb: float = Field(
        80, gt=0, description="memory of one GPU, as its name gives it (an H100 80GB: 80): validate refuses a verl "
        "configuration whose estimated per-GPU peak exceeds it"
    )
    cpus_per_task: int = Field(1, ge=1, description="CPU cores per task (sbatch --cpus-per-task)")
    mem_gb: float | None = Field(None, gt=0, description="memory per node in GB (sbatch --mem); null: the partition's default")
    time_min: int = Field(60, ge=1, description="time limit of one job in minutes (sbatch --time); a longer run continues from its checkpoint in a requeued job")
    array_parallelism: int = Field(
        64, ge=1, description="at most this many of the sweep's runs at once: the SLURM array's %N, and the local executor's bound too"
    )
    container_image: ScriptLine | None = Field(
        None, description="image the job runs in: pyxis/enroot (an image ref or .sqsh) or apptainer (a .sif or docker://...)"
    )
    container_runtime: Literal["pyxis", "apptainer"] = Field("pyxis", description="how container_image runs: pyxis/enroot (srun --container-image) or apptainer")
    setup: list[ScriptLine] = Field(default_factory=list, description="shell lines run before the job (modules, venv)")
    additional: dict[SbatchFlag, ScriptValue] = Field(default_factory=dict, description="extra sbatch parameters")

    @model_serializer(mode="wrap")
    def _dump(self, handler) -> dict[str, Any]:
        return without_defaults(handler(self), {"device": "cuda", "gpu_memory_gb": 80})

    @model_validator(mode="after")
    def _cpu_requests_no_gpu(self) -> ClusterSpec:
        if self.device == "cpu" and self.gpus_per_node:
            raise ValueError("device cpu trains on CPU cores and requests no GPU: leave gpus_per_node at 0")
        return self

    @field_validator("container_image")
    @classmethod
    def _one_image(cls, value: str | None) -> str | None:
        if value is not None and (not value.strip() or any(c.isspace() for c in value)):
            raise ValueError(f"one image reference or path without spaces, got {value!r}")
        return value

    @field_validator("setup")
    @classmethod
    def _no_directive_in_setup(cls, lines: list[str]) -> list[str]:
        # setup lines sit above the first command, where sbatch still reads "#SBATCH" comments
        for line in lines:
            if line.lstrip().upper().startswith("#SBATCH"):
                raise ValueError(f"an sbatch directive in setup ({line!r}): set it in cluster.additional")
        return lines

    @field_validator("container_runtime")
    @classmethod
    def _image_fits_runtime(cls, value: str, info: ValidationInfo) -> str:
        image = info.data.get("container_image")
        # apptainer runs a SIF file or pulls a URI; a bare "repo:tag" is pyxis/enroot syntax
        if image and value == "apptainer" and not (image.endswith(".sif") or APPTAINER_URI.match(image)):
            raise ValueError(f"apptainer needs container_image to be a .sif file or a docker:// / oras:// / library:// URI, got {image!r}")
        return value
