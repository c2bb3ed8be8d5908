"""A verl RunSpec → the Hydra override list and command for `python -m verl.trainer.main_ppo`.

Order of the list: the template's base settings (templates/verl/), then the spec's settings, which
win on the same key. Keys are verl 0.9.1's (docs/verl-internals.md#config-keys-and-offline-composition); `validate_runs`
composes the result against the installed config.

One function per verl config area (model, data, rollout, algorithm, optimizer, batch layout,
trainer, device), in the order verl's config reads; the batch layout and its batching strategies
are `layout`.
"""

from __future__ import annotations

import re
import shlex
from collections.abc import Iterable

from cancelctl.backends.verl.cpu.render import cpu_rollout, device_settings
from cancelctl.backends.verl.data_files import scored_by_cancelctl
from cancelctl.spec.batching import minibatch_order
from cancelctl.backends.verl.errors import VerlRenderError
from cancelctl.backends.verl.layout import (
    TRAINER_MODE,
    TRAINER_PLUGIN_MODULE,
    apply_batch_layout,
    ranks_per_node,
    training_ranks,
)
from cancelctl.backends.verl.overrides import ACTOR, ROLLOUT, OverrideSet
from cancelctl.backends.verl.templates import Template, TemplateError, default_template, load_template
from cancelctl.installed import installed
from cancelctl.jobs.hardware import BF16_KERNEL_FLAGS
from cancelctl.spec.run import RunSpec, planned_steps
from losses.catalog import verl_loss_name

VERL_ENTRY = ["python3", "-m", "verl.trainer.main_ppo"]
CONFIG_NAME = {"fsdp": "ppo_trainer", "fsdp2": "ppo_trainer", "megatron": "ppo_megatron_trainer"}
# The loss plugin (losses/verl_plugin.py, entry point `verl.plugins`) registers these names.
LOSS_PLUGIN_MODULE = "losses.verl_plugin"
POLICY_LOSS_TARGET = "cancelctl.backends.verl.config.CancelPolicyLossConfig"

POLICY_LOSS = f"{ACTOR}.policy_loss"
# Settings that differ between the seeds / names of one arm but never change whether the config
# composes: compose.py validates one representative per set that only differs in these.
RUN_IDENTITY_KEYS = (
    "trainer.experiment_name",
    "data.seed",
    f"{ACTOR}.data_loader_seed",
    f"{ROLLOUT}.seed",
    f"{POLICY_LOSS}.inject_noise_seed",
)

_SHELL_SAFE = re.compile(r"[A-Za-z0-9_@%+=:,./-]+")
_SHELL_SPECIAL_IN_DOUBLE_QUOTES = re.compile(r'[$`"\\!]')
_TORCH_OPTIMIZER = {"adamw": "AdamW", "adam": "Adam", "sgd": "SGD"}
# rollout.precision as verl's rollout.dtype (vLLM's and SGLang's dtype; the hf_cpu rollout loads its model and
# the synced weights in it): verl's default is bfloat16, so an fp32 spec must say so
ROLLOUT_DTYPE = {"bf16": "bfloat16", "fp16": "float16", "fp32": "float32"}
# The hf_cpu rollout in bf16 / fp32, same process, 1 thread (benchmarks/bench_rollout_precision.py, SmolLM2-135M,
# 8 prompts x G 4 x 24 tokens, on a 2-core Xeon with AVX512-BF16 and AMX, 2026-11-27): generation 64.2 vs 31.4
# new tokens/s, the log-prob pass 785 vs 227 tokens/s. Without those flags torch emulates bf16 matmuls
# (~7x slower than fp32 on CI's EPYC, docs/verl.md).
BF16_ROLLOUT_SPEEDUP = {"generation": 2.0, "log-prob pass": 3.5}


def loss_mode(loss: str, verl_builtin: str | None = None) -> str:
    """actor.policy_loss.loss_mode of a run of `loss`: its name in verl's registry (cancel_<loss>), or
    the built-in loss of verl's the arm names instead (`algorithm.verl_loss_mode`)."""
    return verl_builtin or verl_loss_name(loss)


def config_name(run: RunSpec) -> str:
    return CONFIG_NAME[run.spec.model.strategy]


def render_command(run: RunSpec) -> list[str]:
    """argv of the training command (no shell quoting; see `format_command` for a shell line)."""
    return [*VERL_ENTRY, "--config-name", config_name(run), *render_overrides(run)]


def format_command(argv: list[str], env: dict[str, str] | None = None) -> str:
    """A POSIX shell line: `NAME=value` settings, program and options first, then one override
    per line.

    Arguments are quoted for the shell so Hydra's own quotes and `[...]` lists survive pasting.
    """
    first = next((i for i, a in enumerate(argv) if "=" in a), len(argv))
    settings = [f"{name}={_shell_quote(value)}" for name, value in (env or {}).items()]
    head = " ".join([*settings, *(_shell_quote(a) for a in argv[:first])])
    return " \\\n    ".join([head, *(_shell_quote(a) for a in argv[first:])])


def _shell_quote(arg: str) -> str:
    if _SHELL_SAFE.fullmatch(arg):
        return arg
    if not _SHELL_SPECIAL_IN_DOUBLE_QUOTES.search(arg):
        return f'"{arg}"'  # reads better than shlex's '"'"' around Hydra's single quotes
    return shlex.quote(arg)


def render_overrides(run: RunSpec) -> list[str]:
    return render_override_set(run).lines()


def render_override_set(run: RunSpec) -> OverrideSet:
    spec = run.spec
    if spec.backend != "verl":
        raise VerlRenderError(run, "backend", f"backend is {spec.backend!r}, not verl")
    template = _template(run)
    out = OverrideSet()
    out.update(template.overrides)
    out.update(_spec_settings(run, template))
    return out


def launch_blockers(run: RunSpec) -> list[str]:
    """Why this run cannot start in this job, though its config composes (empty = ready)."""
    blockers = []
    if not installed(LOSS_PLUGIN_MODULE) and run.spec.algorithm.verl_loss_mode is None:
        loss = loss_mode(run.spec.algorithm.loss)
        blockers.append(f"{LOSS_PLUGIN_MODULE} (registers {loss} in verl) is not installed")
    if minibatch_order(run.spec) != "default" and not installed(TRAINER_PLUGIN_MODULE):
        blockers.append(f"{TRAINER_PLUGIN_MODULE} (registers trainer_mode {TRAINER_MODE} in verl) is not installed")
    return blockers


def _template(run: RunSpec) -> Template:
    model = run.spec.model
    name = model.template or default_template(model.strategy)
    try:
        template = load_template(name)
    except TemplateError as exc:
        raise VerlRenderError(run, "model.template", str(exc)) from None
    if template.strategies and model.strategy not in template.strategies:
        raise VerlRenderError(
            run,
            "model.template",
            f"template {name!r} is for strategy {'/'.join(template.strategies)}, the spec uses {model.strategy}",
        )
    return template


def _spec_settings(run: RunSpec, template: Template) -> OverrideSet:
    out = OverrideSet()
    _model(run, out)
    _data(run, out)
    _rollout(run, out)
    _algorithm(run, out)
    apply_batch_layout(run, template, out)
    _trainer(run, out, template)
    device_settings(run, out)
    return out


def _model(run: RunSpec, out: OverrideSet) -> None:
    model = run.spec.model
    if model.dtype == "fp32":
        if model.strategy == "megatron":
            raise VerlRenderError(run, "model.dtype", "fp32 training is rendered for strategy fsdp/fsdp2; megatron trains in bf16")
        # FSDP's compute dtype (verl workers/engine/fsdp/transformer_impl.py:391-403; autocast is skipped
        # for fp32 at :1555). Where it matters: CPUs without AVX512-BF16/AMX emulate bf16 matmuls (~7x
        # slower than fp32 on CI's EPYC), so a real model on the CPU runtime trains in fp32.
        fp32 = {"param_dtype": "fp32", "reduce_dtype": "fp32", "buffer_dtype": "fp32"}
        out.set(f"{ACTOR}.fsdp_config.mixed_precision", fp32, add=True)
    out.set("actor_rollout_ref.model.path", model.path)
    out.set("actor_rollout_ref.model.enable_gradient_checkpointing", model.gradient_checkpointing)
    if model.strategy == "megatron":
        out.set(f"{ACTOR}.megatron.tensor_model_parallel_size", model.tensor_parallel)
        out.set(f"{ACTOR}.megatron.pipeline_model_parallel_size", model.pipeline_parallel)
        if model.context_parallel > 1:  # at 1, a template's own setting stands (the reference model follows
            # the actor's: trainer/config/_generated_ppo_megatron_trainer.yaml:263)
            out.set(f"{ACTOR}.megatron.context_parallel_size", model.context_parallel)
    else:
        if model.tensor_parallel > 1 or model.pipeline_parallel > 1:
            raise VerlRenderError(
                run,
                "model.tensor_parallel",
                "tensor/pipeline parallel sizes apply to strategy megatron; FSDP shards instead",
            )
        if model.context_parallel > 1:
            raise VerlRenderError(
                run,
                "model.context_parallel",
                "context parallel applies to strategy megatron (FSDP's sequence split is verl's Ulysses, "
                "actor_rollout_ref.actor.ulysses_sequence_parallel_size in a template)",
            )
        out.set(f"{ACTOR}.strategy", model.strategy)
    n_gpus = training_ranks(run)
    if n_gpus % model.rollout_tensor_parallel:
        raise VerlRenderError(
            run, "model.rollout_tensor_parallel", f"{model.rollout_tensor_parallel} does not divide the {n_gpus} GPUs"
        )
    out.set(f"{ROLLOUT}.tensor_model_parallel_size", model.rollout_tensor_parallel)


def _data(run: RunSpec, out: OverrideSet) -> None:
    spec = run.spec
    out.set("data.train_files", list(spec.data.train_files))
    # verl always builds a validation set; without val files it reads the training files and
    # `_trainer` switches validation off.
    out.set("data.val_files", list(spec.data.val_files or spec.data.train_files))
    out.set("data.max_prompt_length", spec.data.max_prompt_length)
    # Only consumed as the rollout's response length (docs/verl-internals.md#config-keys-and-offline-composition); keep both equal to the cap.
    out.set("data.max_response_length", spec.max_new_tokens)
    out.set("data.train_batch_size", spec.budget.prompts_per_step)
    out.set("data.seed", spec.seed)
    if spec.data.reward_function:
        path, _, name = spec.data.reward_function.partition(":")
        out.set("reward.custom_reward_function.path", path)
        out.set("reward.custom_reward_function.name", name or "compute_score")
    elif scored_by_cancelctl(spec):  # data `cancelctl data prepare` made: its rewards, by data_source
        from cancelctl.data.rewards import REWARD_FUNCTION, REWARD_MODULE

        out.set("reward.custom_reward_function.path", REWARD_MODULE)
        out.set("reward.custom_reward_function.name", REWARD_FUNCTION)


def _rollout(run: RunSpec, out: OverrideSet) -> None:
    spec = run.spec
    rollout = spec.rollout
    out.set(f"{ROLLOUT}.name", rollout.engine)
    out.set(f"{ROLLOUT}.n", rollout.G)
    out.set(f"{ROLLOUT}.temperature", rollout.temperature)
    out.set(f"{ROLLOUT}.top_p", rollout.top_p)
    out.set(f"{ROLLOUT}.dtype", ROLLOUT_DTYPE[rollout.precision])
    out.set(f"{ROLLOUT}.response_length", spec.max_new_tokens)
    out.set(f"{ROLLOUT}.gpu_memory_utilization", rollout.gpu_memory_utilization)
    out.set(f"{ROLLOUT}.seed", spec.seed)
    # avg@k: k sampled answers per validation prompt at the training temperature (k=1: greedy).
    out.set(f"{ROLLOUT}.val_kwargs.n", spec.eval.k)
    out.set(f"{ROLLOUT}.val_kwargs.do_sample", spec.eval.k > 1)
    out.set(f"{ROLLOUT}.val_kwargs.temperature", rollout.temperature if spec.eval.k > 1 else 0.0)
    out.set(f"{ROLLOUT}.val_kwargs.top_p", rollout.top_p)


def _algorithm(run: RunSpec, out: OverrideSet) -> None:
    spec = run.spec
    alg = spec.algorithm
    out.set("algorithm.adv_estimator", "grpo")
    out.set("algorithm.norm_adv_by_std_in_grpo", True)  # [D] eq. 43: A = (R - mean) / (std + 1e-6)
    out.set(f"{POLICY_LOSS}._target_", POLICY_LOSS_TARGET)
    out.set(f"{POLICY_LOSS}.loss_mode", loss_mode(alg.loss, alg.verl_loss_mode))
    if alg.loss == "dfpo":
        out.set(f"{POLICY_LOSS}.transform", alg.dfpo.transform, add=True)
        out.set(f"{POLICY_LOSS}.stop_grad", alg.dfpo.stop_grad, add=True)
        out.set(f"{POLICY_LOSS}.scale", alg.dfpo.scale, add=True)
        out.set(f"{POLICY_LOSS}.eps1", alg.dfpo.eps1, add=True)
        out.set(f"{POLICY_LOSS}.group_size", spec.rollout.G, add=True)
    if alg.inject_delta is not None:
        out.set(f"{POLICY_LOSS}.inject_delta", alg.inject_delta.delta, add=True)
        out.set(f"{POLICY_LOSS}.inject_delta_p_low", alg.inject_delta.p_low, add=True)
    if alg.inject_noise is not None:
        out.set(f"{POLICY_LOSS}.inject_noise_sigma", alg.inject_noise.sigma, add=True)
        out.set(f"{POLICY_LOSS}.inject_noise_seed", spec.seed, add=True)
    if alg.probe is not None:
        out.set(f"{POLICY_LOSS}.probe", alg.probe, add=True)
    out.set(f"{POLICY_LOSS}.monitor_delta", alg.monitor_delta, add=True)

    out.set(f"{ACTOR}.clip_ratio_low", alg.clip_low)
    out.set(f"{ACTOR}.clip_ratio_high", alg.clip_high)
    out.set(f"{ACTOR}.clip_ratio_c", alg.clip_dual_c)
    out.set(f"{ACTOR}.loss_agg_mode", alg.agg_mode)
    out.set(f"{ACTOR}.entropy_coeff", alg.entropy_coef)
    out.set(f"{ACTOR}.use_kl_loss", alg.kl_coef > 0)
    if alg.kl_coef > 0:
        out.set(f"{ACTOR}.kl_loss_coef", alg.kl_coef)
    out.set(f"{ACTOR}.ppo_mini_batch_size", spec.mini_batch_prompts)
    out.set(f"{ACTOR}.ppo_epochs", alg.ppo_epochs)
    out.set(f"{ACTOR}.data_loader_seed", spec.seed)
    _optimizer(run, out)

    if alg.tis is not None:  # tis(cap=C) = verl's token-level truncated IS (docs/losses.md#token-weight-wrappers)
        out.set("algorithm.rollout_correction.rollout_is", "token")
        out.set("algorithm.rollout_correction.rollout_is_threshold", alg.tis.cap)


def _optimizer(run: RunSpec, out: OverrideSet) -> None:
    alg = run.spec.algorithm
    optim = f"{ACTOR}.optim"
    out.set(f"{optim}.lr", alg.lr)
    out.set(f"{optim}.weight_decay", alg.weight_decay)
    out.set(f"{optim}.clip_grad", alg.grad_clip)
    if run.spec.model.strategy == "megatron":
        # Megatron's "adam" decouples weight decay (= AdamW); plain Adam only matches without decay.
        if alg.optimizer == "adam" and alg.weight_decay > 0:
            raise VerlRenderError(
                run, "algorithm.optimizer", "megatron has no coupled-L2 Adam; use adamw, or weight_decay 0"
            )
        out.set(f"{optim}.optimizer", "sgd" if alg.optimizer == "sgd" else "adam")
    else:
        out.set(f"{optim}.optimizer", _TORCH_OPTIMIZER[alg.optimizer])


def step_cap(run: RunSpec) -> int:
    """verl's `trainer.total_training_steps`: the steps of a step budget or of an update-step budget
    (a fixed number of optimizer steps a step), and for a generated-token budget a cap verl can never
    reach first — the job ends verl at the step whose tokens reach the budget (entry.py) — from every
    response having at least one token: gen_tokens / (prompts × G) steps."""
    spec = run.spec
    steps = planned_steps(spec)
    return steps if steps is not None else -(-spec.budget.gen_tokens // (spec.budget.prompts_per_step * spec.rollout.G))


def _trainer(run: RunSpec, out: OverrideSet, template: Template) -> None:
    spec = run.spec
    cap = step_cap(run)
    if spec.budget.gen_tokens is not None:
        # verl lays a step-keyed LR schedule (warmup ratio, cosine decay) over total_training_steps,
        # which is the cap here, not the step the budget ends at: only verl's constant LR is faithful
        schedule = {k.rsplit(".", 1)[-1]: v.value for k, v in template.overrides.settings.items() if ".optim.lr_" in k}
        if schedule.get("lr_scheduler_type", "constant") != "constant" or schedule.get("lr_warmup_steps_ratio", 0) not in (0, None):
            raise VerlRenderError(run, "budget.gen_tokens", (
                "a token budget ends at a step verl does not know in advance, so a step-keyed LR schedule "
                f"({schedule}) would be laid out over the cap of {cap} steps: use a constant LR or a steps/update_steps budget"))
    out.set("trainer.total_training_steps", cap)
    if spec.budget.checkpoint_every is not None:
        out.set("trainer.save_freq", spec.budget.checkpoint_every)
    # verl stops at whichever comes first, epochs or steps; one step per epoch at least.
    out.set("trainer.total_epochs", cap)
    out.set("trainer.nnodes", spec.cluster.nodes)
    out.set("trainer.n_gpus_per_node", ranks_per_node(run))
    out.set("trainer.logger", ["console", "mlflow"])
    out.set("trainer.project_name", spec.tracking.experiment or run.sweep)  # = the MLflow experiment
    out.set("trainer.experiment_name", run.name)
    if spec.data.val_files:
        out.set("trainer.test_freq", spec.eval.every)
    else:
        out.set("trainer.test_freq", -1)
        out.set("trainer.val_before_train", False)


def rollout_precision_note(run: RunSpec, cpu_kernels: str | Iterable[str] = ()) -> str | None:
    """One line for `render`: a CPU run's rollout (hf_cpu or verl's vLLM, `cpu_rollout`) in bf16 / fp16 against its
    trainer, and what bf16 costs on CPUs (`cpu_kernels`: the flags of the machine asked, e.g.
    `jobs.hardware.cpu_flags()`; the speed-ups are hf_cpu's, measured)."""
    spec = run.spec
    if spec.backend != "verl" or spec.cluster.device != "cpu" or spec.rollout.precision == "fp32":
        return None
    flags = set(cpu_kernels.split() if isinstance(cpu_kernels, str) else cpu_kernels)
    here = [flag for flag in BF16_KERNEL_FLAGS if flag in flags]
    speed = ", ".join(f"{what} {x:.1f}x" for what, x in BF16_ROLLOUT_SPEEDUP.items())
    rollout = "verl's vLLM" if cpu_rollout(run) == "vllm" else "the hf_cpu"
    return (
        f"rollout.precision {spec.rollout.precision}: {rollout} rollout generates and scores in {spec.rollout.precision} "
        f"against the {spec.model.dtype} trainer, a train-inference mismatch (mismatch/*) as on GPUs; bf16 vs fp32 "
        f"speed of the hf_cpu rollout on a Xeon with AVX512-BF16/AMX: {speed}, and ~7x slower on CPUs without them (this machine: "
        + (f"{'/'.join(here)} present" if here else "neither")
        + "); rollout.precision: fp32 for a rollout that is the trainer's to rounding"
    )
