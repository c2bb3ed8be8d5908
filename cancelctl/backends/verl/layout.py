"""How a verl run's update batches are laid out: the order of rows (whole groups or not), the
mini- and micro-batch sizes, and the ranks they are spread over — with the checks verl itself would
only make mid-run, on the cluster.

Batching on verl (docs/losses.md#batching-strategies;
docs/verl-internals.md#the-batch-order), all on verl's default V1 trainer:
- `default`: the V1 trainer as shipped (it balances sequence lengths across ranks and scatters a
  prompt's rollouts over ranks and mini-batches).
- `query_preserved`: cancelctl's registered V1 trainer (`trainer.v1.trainer_mode=cancelctl`,
  trainer.py, imported through the `verl.plugins` entry point) with
  `+trainer.v1.cancelctl.batching=query_preserved`: every mini-batch, and every rank's share of it,
  holds whole groups (mini-batch prompts divisible by the data-parallel size, checked here);
  `actor.shuffle` off; fixed micro-batches a multiple of G, dynamic ones get `force_group_size=G`.
- `sign_split` (negative control): the same trainer with `batching=sign_split`: Â>0 and Â<0 rows
  in separate mini-batches (signs from the rewards: advantages do not exist yet when verl orders
  the batch).
- `reward_balanced`: verl's sync trainer with the custom sampler `sampler.RewardBalancedReplayBuffer`
  (`trainer.v1.sampler.custom_sampler`), `data.gen_batch_size=1` so it can refill any number of
  prompts.
- DFPO transforms weights inside each group (docs/losses.md#dfpo, step 5), so a dfpo run always gets the
  query-preserving order, whatever `batching.strategy` says (`default`, `query_preserved`, or
  `reward_balanced`, whose sampler selects whole groups); dfpo with `sign_split` is refused (that
  control puts a group's positive and negative rows in different mini-batches by design).
"""

from __future__ import annotations

import math

from cancelctl.backends.verl.errors import VerlRenderError
from cancelctl.backends.verl.overrides import ACTOR, ROLLOUT, OverrideSet
from cancelctl.backends.verl.templates import Template
from cancelctl.spec.experiment import ExperimentSpec
from cancelctl.spec.run import RunSpec
from cancelctl.spec.batching import minibatch_order

REWARD_BALANCED_SAMPLER_MODULE = "cancelctl.backends.verl.sampler"
REWARD_BALANCED_SAMPLER_CLASS = "RewardBalancedReplayBuffer"
# The V1 trainer (trainer.py) registered under this name by the `verl.plugins` entry point.
TRAINER_MODE = "cancelctl"
TRAINER_PLUGIN_MODULE = "cancelctl.backends.verl.plugin_trainer"
VERL_PPO_MAX_TOKEN_LEN_PER_GPU = 16384  # verl 0.9.1's default for actor.ppo_max_token_len_per_gpu


def uses_query_preserving_layout(spec: ExperimentSpec) -> bool:
    return minibatch_order(spec) == "query_preserved"


def group_aligned_micro_batch(spec: ExperimentSpec) -> int:
    """Smallest multiple of G not below the requested micro-batch: a micro-batch of whole groups.

    Micro-batching only splits the gradient accumulation (verl aggregates with the global batch
    size: docs/verl-internals.md#whole-groups-in-micro-batches), so this changes memory use, not the update.
    """
    G, micro = spec.rollout.G, spec.algorithm.micro_batch_size_per_gpu
    return G * math.ceil(micro / G)


def apply_batch_layout(run: RunSpec, template: Template, out: OverrideSet) -> None:
    spec = run.spec
    micro = spec.algorithm.micro_batch_size_per_gpu
    order = minibatch_order(spec)
    if spec.batching.strategy != "default":
        out.set("trainer.use_v1", True)
    if spec.batching.strategy == "reward_balanced":
        out.set("trainer.v1.sampler.custom_sampler.path", f"pkg://{REWARD_BALANCED_SAMPLER_MODULE}")
        out.set("trainer.v1.sampler.custom_sampler.name", REWARD_BALANCED_SAMPLER_CLASS)
        out.set("trainer.v1.sampler.sampler_kwargs.min_frac", spec.batching.min_frac, add=True)
        out.set("data.gen_batch_size", 1)  # refill in any number of prompts (docs/verl-internals.md#reward-balanced-sampling)
    if order != "default":
        if order == "query_preserved":
            dp = data_parallel_size(run, template)
            if spec.mini_batch_prompts % dp:
                raise VerlRenderError(
                    run,
                    "algorithm.mini_batch_size",
                    f"whole groups per rank need mini-batch prompts ({spec.mini_batch_prompts}) divisible by the "
                    f"data-parallel size ({dp})",
                )
            micro = group_aligned_micro_batch(spec)
            _check_group_fits_token_budget(run, template)
        out.set("trainer.use_v1", True)
        out.set("trainer.v1.trainer_mode", TRAINER_MODE)
        out.set(f"trainer.v1.{TRAINER_MODE}.batching", order, add=True)
        out.set(f"{ACTOR}.shuffle", False)  # verl's iterator would shuffle rows across the order
    _check_micro_batches_divide_rank_shares(run, template, micro)
    out.set(f"{ACTOR}.ppo_micro_batch_size_per_gpu", micro)
    # a log-prob pass computes no loss (verl v1 trainer: compute_loss False), so it needs no whole
    # groups: the arm's own micro-batch, kept a divisor of the update's so it divides each rank's share
    log_prob = math.gcd(micro, spec.algorithm.micro_batch_size_per_gpu)
    out.set(f"{ROLLOUT}.log_prob_micro_batch_size_per_gpu", log_prob)
    out.set("actor_rollout_ref.ref.log_prob_micro_batch_size_per_gpu", log_prob)


def _check_micro_batches_divide_rank_shares(run: RunSpec, template: Template, micro: int) -> None:
    """Fixed micro-batches (no `use_dynamic_bsz`): verl asserts in every update that each rank's share
    of a mini-batch is a whole number of micro-batches (workers/engine/utils.py:124) — an error that
    would otherwise first show on the cluster, after the queue and the model load."""
    if _dynamic_bsz(template):
        return
    spec = run.spec
    dp = data_parallel_size(run, template)
    rows = spec.mini_batch_prompts * spec.rollout.G
    if rows % dp or (rows // dp) % micro:
        raise VerlRenderError(
            run,
            "algorithm.micro_batch_size_per_gpu",
            f"each rank's share of a mini-batch ({spec.mini_batch_prompts} prompts x G {spec.rollout.G} / {dp} ranks = "
            f"{rows / dp:g} rows) must be a whole number of micro-batches of {micro} rows; verl asserts it in every update",
        )


def _dynamic_bsz(template: Template) -> bool:
    dynamic = template.overrides.settings.get(f"{ACTOR}.use_dynamic_bsz")
    return dynamic is not None and str(dynamic.value).lower() == "true"


def _check_group_fits_token_budget(run: RunSpec, template: Template) -> None:
    """Under `use_dynamic_bsz` a group is one indivisible unit of a token-budgeted micro-batch
    (`force_group_size`): verl raises mid-run if a whole group can exceed the per-GPU budget."""
    if not _dynamic_bsz(template):
        return
    budget_setting = template.overrides.settings.get(f"{ACTOR}.ppo_max_token_len_per_gpu")
    try:
        budget = int(budget_setting.value) if budget_setting is not None else VERL_PPO_MAX_TOKEN_LEN_PER_GPU
    except (TypeError, ValueError):
        return  # a `${...}` reference: only the composed config knows it
    spec = run.spec
    group_tokens = spec.rollout.G * (spec.data.max_prompt_length + spec.max_new_tokens)
    if group_tokens > budget:
        raise VerlRenderError(
            run,
            "model.template",
            f"whole groups per micro-batch under use_dynamic_bsz need ppo_max_token_len_per_gpu >= G x (prompt + "
            f"response) = {group_tokens}; the template gives {budget}. Raise it, or turn use_dynamic_bsz off.",
        )


def ranks_per_node(run: RunSpec) -> int:
    """Training ranks per node: one per GPU, or one CPU rank (cluster.device cpu)."""
    cluster = run.spec.cluster
    if cluster.device == "cpu":
        return 1
    if cluster.gpus_per_node < 1:
        raise VerlRenderError(
            run, "cluster.gpus_per_node", "verl needs GPUs: set cluster.gpus_per_node (and nodes), or cluster.device: cpu"
        )
    return cluster.gpus_per_node


def training_ranks(run: RunSpec) -> int:
    return run.spec.cluster.nodes * ranks_per_node(run)


def data_parallel_size(run: RunSpec, template: Template) -> int:
    model = run.spec.model
    n_gpus = training_ranks(run)
    if model.strategy != "megatron":
        return n_gpus
    # context-parallel ranks share a data-parallel rank's micro-batches (verl's megatron engine:
    # get_data_parallel_rank is mpu's, without CP; workers/engine/megatron/transformer_impl.py:750-766)
    cp = context_parallel_size(run, template)
    model_parallel = model.tensor_parallel * model.pipeline_parallel * cp
    if n_gpus % model_parallel:
        raise VerlRenderError(
            run,
            "model.context_parallel" if model.context_parallel > 1 else "model.tensor_parallel",
            f"TP x PP x CP = {model.tensor_parallel} x {model.pipeline_parallel} x {cp} = {model_parallel} does not "
            f"divide the {n_gpus} GPUs",
        )
    return n_gpus // model_parallel


def context_parallel_size(run: RunSpec, template: Template) -> int:
    """Megatron's context parallel: the spec's `model.context_parallel`, else the template's setting."""
    if run.spec.model.context_parallel > 1:
        return run.spec.model.context_parallel
    cp_setting = template.overrides.settings.get(f"{ACTOR}.megatron.context_parallel_size")
    return int(cp_setting.value) if cp_setting is not None else 1
