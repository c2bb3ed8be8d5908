"""Will a verl run fit its GPUs? Each configuration's per-GPU memory (formulas: `memory`), before the queue.

A run's model shape comes from its config.json, found offline (`model.path` as a folder, or its
snapshot in the Hugging Face cache; never the network); its update and rollout settings from the
overrides it renders (template + spec), with verl 0.9.1's defaults for the rest. `validate` refuses a
run whose estimate exceeds `cluster.gpu_memory_gb` (at the line of `model.path` for the update, of
`rollout.gpu_memory_utilization` for the rollout where the file writes it, else `model.path`) with the
breakdown and the levers that would make it fit, each with what it would bring the estimate to (below
the warning band); it warns within 10% of the GPU. Where the config.json is not here, or is not a
model's shape (a list, counts as strings, a count below 1), the check is skipped and the reason said
once, naming the file. Runs on CPU (cluster.device cpu) have no GPU to fit.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, replace
from itertools import combinations
from typing import TYPE_CHECKING, Any

from cancelctl.backends.verl.memory import (
    BF16,
    FP32,
    GIB,
    RUNTIME_RESERVE,
    MemoryEstimate,
    RolloutSetup,
    TrainingSetup,
    estimate,
    gib,
    resident_between_updates,
)
from cancelctl.backends.verl.model_shape import MemorySkipped, ModelShape, model_shape

if TYPE_CHECKING:
    from cancelctl.spec.run import RunSpec

WARN_WITHIN = 0.10  # warn when the estimate is this close to the GPU's memory; a lever lands below it
TRAIN_FIELD, ROLLOUT_FIELD = "model.path", "rollout.gpu_memory_utilization"
MAX_NODES = 64  # the "more GPUs" lever looks this far
MAX_UTILIZATION = 0.9  # the most of a GPU the levers give the rollout engine
# verl 0.9.1's defaults of what the rendered overrides may leave unset (trainer/config/_generated_ppo_trainer.yaml)
VERL_DEFAULTS = {"ppo_max_token_len_per_gpu": 16384, "max_num_seqs": 256,
                 "max_num_batched_tokens": 8192}


@dataclass(frozen=True)
class MemoryCheck:
    """One configuration's estimate, whether it fits, and the levers when it does not."""

    model: str
    params: int
    estimate: MemoryEstimate
    levers: tuple[str, ...] = ()
    rollout_field: str = ROLLOUT_FIELD  # where a rollout-only overflow is pointed at: model.path where the file
    # does not write rollout.gpu_memory_utilization (its default is nowhere in the file)

    @property
    def gpu(self) -> float:
        return self.estimate.gpu_bytes

    @property
    def problems(self) -> tuple[str, ...]:
        """"train", "rollout" (over the GPU), "engine" (the rollout engine's share cannot hold one sequence)."""
        return problems_of(self.estimate)

    @property
    def problem(self) -> str | None:
        return self.problems[0] if self.problems else None

    @property
    def field(self) -> str:
        return TRAIN_FIELD if self.problem in (None, "train") else self.rollout_field

    def refusal(self) -> str | None:
        problem = self.problem
        if problem is None:
            return None
        e = self.estimate
        head = f"GPU memory: {self.model} ({self.params / 1e9:.2f}B parameters) needs {e.summary()} GiB (cluster.gpu_memory_gb)"
        if problem == "engine":
            kv = e.kv_cache
            head += (f"; the rollout engine's share (rollout.gpu_memory_utilization) leaves {gib(kv.pool)} GiB of KV cache, "
                     f"less than one {gib(kv.per_sequence)} GiB sequence (prompt + response): vLLM refuses to start")
        over = [p.breakdown() for p in (e.train, e.rollout) if p.total > self.gpu] or [e.rollout.breakdown()]
        levers = "; ".join(self.levers) if self.levers else "none found within these levers"
        return f"{head}; {'; '.join(over)}; would fit: {levers}"

    def warning(self) -> str | None:
        if self.problem is not None or self.estimate.peak <= (1 - WARN_WITHIN) * self.gpu:
            return None
        phase = max((self.estimate.train, self.estimate.rollout), key=lambda p: p.total)
        return (f"GPU memory: {self.model} needs {self.estimate.summary()} GiB, within {WARN_WITHIN:.0%} of the GPU "
                f"(allocator fragmentation can take that): {phase.breakdown()}")

    def note(self) -> str:
        """What `plan` shows: the summary, and the KV cache's room when it cannot hold a step's sequences at once."""
        kv = self.estimate.kv_cache
        room = f" (KV cache holds {kv.holds} of {kv.sequences} sequences)" if 0 < kv.holds < kv.sequences else ""
        return self.estimate.summary() + room

    def to_json(self) -> dict[str, Any]:
        return {"model": self.model, "params": self.params, **self.estimate.to_json(), "fits": self.problem is None,
                "problem": self.problem, "levers": list(self.levers)}


def problems_of(e: MemoryEstimate) -> tuple[str, ...]:
    found = (("train", e.train.total > e.gpu_bytes), ("rollout", e.rollout.total > e.gpu_bytes),
             ("engine", not e.kv_cache.fits_one))
    return tuple(name for name, bad in found if bad)


# ---------------------------------------------------------------- a run's inputs


def setups(run: RunSpec) -> tuple[TrainingSetup, RolloutSetup]:
    """The run's update and rollout as its rendered verl config sets them."""
    from cancelctl.backends.verl.layout import training_ranks
    from cancelctl.backends.verl.overrides import ACTOR, ROLLOUT
    from cancelctl.backends.verl.render import render_override_set

    spec = run.spec
    settings = render_override_set(run).settings

    def value(key: str, default: Any) -> Any:
        found = settings.get(key)
        if found is None or found.value is None or (isinstance(found.value, str) and "${" in found.value):
            return default
        return found.value

    def flag(key: str) -> bool:
        return str(value(key, False)).lower() == "true"

    model, megatron = spec.model, spec.model.strategy == "megatron"
    engine = f"{ACTOR}.megatron" if megatron else f"{ACTOR}.fsdp_config"
    sequence = spec.data.max_prompt_length + spec.max_new_tokens
    rows = int(value(f"{ACTOR}.ppo_micro_batch_size_per_gpu", spec.algorithm.micro_batch_size_per_gpu))
    if flag(f"{ACTOR}.use_dynamic_bsz"):  # a micro-batch packs up to the token budget (one sequence at least)
        tokens = max(int(value(f"{ACTOR}.ppo_max_token_len_per_gpu", VERL_DEFAULTS["ppo_max_token_len_per_gpu"])), sequence)
        log_prob_tokens = tokens
    else:
        tokens = rows * sequence
        log_prob_tokens = int(value(f"{ROLLOUT}.log_prob_micro_batch_size_per_gpu", rows)) * sequence
    # Megatron recomputes only by its transformer config (megatron.yaml: recompute_granularity null);
    # verl 0.9.1 reads model.enable_gradient_checkpointing in its FSDP engine alone
    # (workers/engine/fsdp/transformer_impl.py:335, 478), never in workers/engine/megatron/.
    recompute = value(f"{ACTOR}.megatron.override_transformer_config.recompute_granularity", None) == "full"
    checkpointing = recompute if megatron else flag("actor_rollout_ref.model.enable_gradient_checkpointing")
    training = TrainingSetup(
        strategy=model.strategy, gpus=training_ranks(run), micro_batch_tokens=tokens, log_prob_tokens=log_prob_tokens,
        tensor_parallel=model.tensor_parallel if megatron else 1,
        pipeline_parallel=model.pipeline_parallel if megatron else 1,
        expert_parallel=int(value(f"{ACTOR}.megatron.expert_model_parallel_size", 1)) if megatron else 1,
        sequence_parallel=int(value(f"{ACTOR}.megatron.context_parallel_size" if megatron
                                    else f"{ACTOR}.ulysses_sequence_parallel_size", 1)),
        compute_bytes=FP32 if model.dtype == "fp32" and not megatron else BF16,
        optimizer=spec.algorithm.optimizer,
        gradient_checkpointing=checkpointing,
        offload_params=flag(f"{engine}.param_offload"), offload_optimizer=flag(f"{engine}.optimizer_offload"),
        cpu_offload_policy=model.strategy == "fsdp2" and flag(f"{ACTOR}.fsdp_config.offload_policy"),
        entropy=spec.algorithm.entropy_coef > 0, reference=spec.algorithm.kl_coef > 0,
        reference_offload=not megatron or flag("actor_rollout_ref.ref.megatron.param_offload")
        or flag(f"{ACTOR}.megatron.param_offload"),
        compiled_entropy=str(value(f"{ACTOR}.fsdp_config.use_torch_compile", True)).lower() == "true",
        # the Megatron engine turns fused kernels off without remove-padding (megatron/transformer_impl.py:522-531)
        fused_kernels=flag("actor_rollout_ref.model.use_fused_kernels")
        and str(value("actor_rollout_ref.model.use_remove_padding", True)).lower() == "true",
    )
    rollout = RolloutSetup(
        tensor_parallel=model.rollout_tensor_parallel,
        gpu_memory_utilization=float(value(f"{ROLLOUT}.gpu_memory_utilization", spec.rollout.gpu_memory_utilization)),
        sequence_tokens=sequence, sequences=_sequences_per_engine(run, training.gpus, model.rollout_tensor_parallel),
        max_num_seqs=int(value(f"{ROLLOUT}.max_num_seqs", VERL_DEFAULTS["max_num_seqs"])),
        max_num_batched_tokens=int(value(f"{ROLLOUT}.max_num_batched_tokens", VERL_DEFAULTS["max_num_batched_tokens"])),
    )
    return training, rollout


def _sequences_per_engine(run: RunSpec, gpus: int, rollout_tp: int) -> int:
    """A step's sequences (prompts × G) over the rollout engine's replicas (GPUs / its tensor parallel)."""
    spec = run.spec
    return math.ceil(spec.budget.prompts_per_step * spec.rollout.G / max(1, gpus // rollout_tp))


# ---------------------------------------------------------------- the check


def check_run(run: RunSpec, shape: ModelShape) -> MemoryCheck:
    training, rollout = setups(run)
    gpu = run.spec.cluster.gpu_memory_gb * GIB
    check = MemoryCheck(run.spec.model.path, shape.params, estimate(shape, training, rollout, gpu))
    if check.problem is None:
        return check
    return replace(check, levers=tuple(_Levers(run, shape, gpu).advice(training, rollout, set(check.problems))))


Setups = tuple[TrainingSetup, RolloutSetup]


@dataclass(frozen=True)
class _Levers:
    """The changes that make a run fit: each alone with the estimate it gives, the smallest node count,
    and when none fits alone, all of them together."""

    run: RunSpec
    shape: ModelShape
    gpu: float

    def fits(self, t: TrainingSetup, r: RolloutSetup) -> MemoryEstimate | None:
        """The estimate with these setups where it fits outside the warning band (a lever that left the run
        within 10% of the GPU would be warned about the moment it was taken)."""
        if t.strategy == "megatron" and t.gpus % (t.model_parallel * t.sequence_parallel):
            return None  # tensor x pipeline x context parallel must divide the GPUs
        e = estimate(self.shape, t, r, self.gpu)
        return e if e.peak <= (1 - WARN_WITHIN) * self.gpu and e.kv_cache.fits_one else None

    def advice(self, training: TrainingSetup, rollout: RolloutSetup, problems: set[str]) -> list[str]:
        """The fewest levers that fit together (every such set of that size, the rollout's share refitted
        after each), and the fewest nodes alone; failing both, the fewest nodes with any set of levers."""
        levers = self.levers(training, rollout, problems)
        out: list[str] = []
        for size in range(len(levers) + 1):  # size 0: the rollout's share refitted alone
            for subset in combinations(levers, size):
                texts, changed = self.apply(subset, training, rollout)
                if texts and (e := self.fits(*changed)) is not None:
                    out.append(f"{' + '.join(texts)}: {e.summary()}")
            if out:
                break
        if (nodes := self.smallest_nodes(training, rollout)) is not None:
            return [*out, f"cluster.nodes: {nodes[0]} ({nodes[2]} GPUs): {nodes[1].summary()}"]
        if out:
            return out
        best = None  # (nodes, levers, texts, estimate)
        for size in range(1, len(levers) + 1):
            for subset in combinations(levers, size):
                texts, changed = self.apply(subset, training, rollout)
                if (nodes := self.smallest_nodes(*changed)) is not None and (best is None or nodes[0] < best[0]):
                    best = (nodes[0], texts, nodes[2], nodes[1])
        if best is None:
            return []
        return [f"{' + '.join(best[1])} + cluster.nodes: {best[0]} ({best[2]} GPUs): {best[3].summary()}"]

    def apply(self, subset, training: TrainingSetup, rollout: RolloutSetup) -> tuple[list[str], Setups]:
        changed = (training, rollout)
        for _, change in subset:
            changed = change(changed)
        changed = self.fill_rollout_share(*changed)
        texts = [text for text, _ in subset]
        if changed[1].gpu_memory_utilization != rollout.gpu_memory_utilization:
            texts.append(f"rollout.gpu_memory_utilization: {changed[1].gpu_memory_utilization:g}")
        return texts, changed

    def levers(self, training: TrainingSetup, rollout: RolloutSetup, problems: set[str]) -> list[tuple[str, Any]]:
        """(what to set, the change of the setups) for each lever that can lower this run's peak."""
        spec, out = self.run.spec, []
        per_node = max(1, spec.cluster.gpus_per_node)
        train, megatron = "train" in problems, training.strategy == "megatron"
        if train and not training.gradient_checkpointing and not megatron:
            out.append(("model.gradient_checkpointing: true", lambda s: (replace(s[0], gradient_checkpointing=True), s[1])))
        one_row = spec.rollout.G if _whole_groups(self.run) else 1
        if train and training.micro_batch_tokens > one_row * rollout.sequence_tokens:
            tokens = one_row * rollout.sequence_tokens
            rows = f" ({one_row} rows: whole groups)" if one_row > 1 else ""
            out.append((f"algorithm.micro_batch_size_per_gpu: 1{rows}",
                        lambda s: (replace(s[0], micro_batch_tokens=tokens, log_prob_tokens=tokens), s[1])))
        if train and training.strategy != "megatron":
            out.append(("model.strategy: fsdp2 with actor_rollout_ref.actor.fsdp_config.offload_policy: true in a template "
                        "(weights, gradients and AdamW's step on the CPU)",
                        lambda s: (replace(s[0], strategy="fsdp2", cpu_offload_policy=True), s[1])))
        offloaded = training.offload_params and training.offload_optimizer
        if megatron and ((train and not training.gradient_checkpointing)
                         or (problems & {"rollout", "engine"} and not offloaded)):
            # Megatron recomputes only by its template (model.gradient_checkpointing is the FSDP engine's)
            out.append(("model.template: megatron-large (full activation recompute; param and optimizer offload "
                        "while the rollout runs)", lambda s: (replace(
                            s[0], gradient_checkpointing=True, offload_params=True, offload_optimizer=True), s[1])))
        elif problems & {"rollout", "engine"} and not offloaded:
            out.append(("model.template: fsdp-large (param and optimizer offload while the rollout runs)",
                        lambda s: (replace(s[0], offload_params=True, offload_optimizer=True), s[1])))
        cp = training.sequence_parallel if megatron else 1
        tp = next((tp for tp in (2, 4, 8) if tp > training.tensor_parallel and tp <= per_node
                   and training.gpus % (tp * training.pipeline_parallel * cp) == 0), None)
        if train and tp is not None:
            how = "" if training.strategy == "megatron" else "model.strategy: megatron, "
            out.append((f"{how}model.tensor_parallel: {tp}", lambda s: (
                replace(s[0], strategy="megatron", tensor_parallel=tp, compute_bytes=BF16, cpu_offload_policy=False), s[1])))
        # context parallel splits each sequence's tokens (activations and logits) over more GPUs: the
        # largest that the GPUs leave beside tensor x pipeline parallel, else twice the present one
        # (with more nodes: `smallest_nodes`)
        model_parallel = training.tensor_parallel * training.pipeline_parallel
        more_cp = max((c for c in (2, 4, 8, 16) if c > cp and training.gpus % (model_parallel * c) == 0),
                      default=2 * cp)
        if train and megatron:
            out.append((f"model.context_parallel: {more_cp}", lambda s: (replace(s[0], sequence_parallel=more_cp), s[1])))
        rollout_tp = next((tp for tp in (2, 4, 8) if tp > rollout.tensor_parallel and tp <= per_node
                           and training.gpus % tp == 0), None)
        if "engine" in problems and rollout_tp is not None:
            out.append((f"model.rollout_tensor_parallel: {rollout_tp}", lambda s: (s[0], replace(
                s[1], tensor_parallel=rollout_tp, sequences=_sequences_per_engine(self.run, s[0].gpus, rollout_tp)))))
        return out

    def fill_rollout_share(self, training: TrainingSetup, rollout: RolloutSetup) -> Setups:
        """The rollout engine's share set to what the update leaves on the GPU below the warning band:
        lowered when the two do not fit together, raised (to MAX_UTILIZATION at most) when the engine
        cannot hold one sequence."""
        usable = (1 - WARN_WITHIN) * self.gpu
        room = (usable - resident_between_updates(self.shape, training) - RUNTIME_RESERVE) / self.gpu
        utilization = math.floor(room * 100) / 100
        if 0 < utilization < rollout.gpu_memory_utilization:
            return training, replace(rollout, gpu_memory_utilization=utilization)
        short = not estimate(self.shape, training, rollout, self.gpu).kv_cache.fits_one
        if short and min(MAX_UTILIZATION, utilization) > rollout.gpu_memory_utilization:
            return training, replace(rollout, gpu_memory_utilization=min(MAX_UTILIZATION, utilization))
        return training, rollout

    def smallest_nodes(self, training: TrainingSetup, rollout: RolloutSetup) -> tuple[int, MemoryEstimate, int] | None:
        """More GPUs shard the update's states further: the fewest nodes (up to MAX_NODES) that fit —
        bisected, as the estimate only falls with more GPUs."""
        per_node = max(1, self.run.spec.cluster.gpus_per_node)

        def at(nodes: int) -> MemoryEstimate | None:
            gpus = nodes * per_node
            r = replace(rollout, sequences=_sequences_per_engine(self.run, gpus, rollout.tensor_parallel))
            return self.fits(replace(training, gpus=gpus), r)

        # only node counts whose GPUs a megatron layout (tensor x pipeline x context parallel) divides
        layout = training.model_parallel * training.sequence_parallel if training.strategy == "megatron" else 1
        nodes = [n for n in range(training.gpus // per_node + 1, MAX_NODES + 1) if n * per_node % layout == 0]
        if not nodes or at(nodes[-1]) is None:
            return None
        low, high = 0, len(nodes) - 1
        while low < high:
            middle = (low + high) // 2
            low, high = (low, middle) if at(nodes[middle]) is not None else (middle + 1, high)
        return nodes[low], at(nodes[low]), nodes[low] * per_node


def _whole_groups(run: RunSpec) -> bool:
    from cancelctl.backends.verl.layout import uses_query_preserving_layout

    return uses_query_preserving_layout(run.spec)


def estimate_runs(runs: list[RunSpec]) -> tuple[dict[str, MemoryCheck], str]:
    """Each GPU verl run's check by run_id (runs that differ only in their seed are estimated once), and
    why some were not estimated ('' when all were) — the first reason, said once."""
    from cancelctl.backends.verl.errors import VerlRenderError

    shapes: dict[str, ModelShape | str] = {}
    by_key: dict[str, MemoryCheck | None] = {}
    out: dict[str, MemoryCheck] = {}
    skipped: dict[str, None] = {}  # each model's reason once, in order
    for run in runs:
        spec = run.spec
        if spec.backend != "verl" or spec.cluster.device == "cpu":
            continue
        path = spec.model.path
        if path not in shapes:
            try:
                shapes[path] = model_shape(path)
            except MemorySkipped as exc:
                shapes[path] = str(exc)
        if isinstance(shapes[path], str):
            skipped[shapes[path]] = None
            continue
        key = _memory_key(spec)
        if key not in by_key:
            try:
                by_key[key] = check_run(run, shapes[path])
            except VerlRenderError:  # a run that does not render is the compose layer's to report
                by_key[key] = None
        if (check := by_key[key]) is not None:
            # the rollout's field where this run's file writes it (runs of one key may differ in that)
            written = "gpu_memory_utilization" in spec.rollout.model_fields_set
            out[run.run_id] = replace(check, rollout_field=ROLLOUT_FIELD if written else TRAIN_FIELD)
    return out, f"GPU memory not estimated: {'; '.join(skipped)}" if skipped else ""


# What of a spec the estimate reads (besides the minibatch order): runs that differ elsewhere (the
# loss, its clips, the seed) render the same memory, and rendering is most of a check's time.
MEMORY_FIELDS = {
    "model": True, "rollout": True, "cluster": True,
    "data": {"max_prompt_length", "max_response_length"},
    "algorithm": {"micro_batch_size_per_gpu", "mini_batch_size", "optimizer", "kl_coef", "entropy_coef"},
    "budget": {"prompts_per_step"}, "batching": {"strategy"},
}


def _memory_key(spec) -> str:
    from cancelctl.spec.batching import minibatch_order

    return json.dumps([spec.model_dump(mode="json", include=MEMORY_FIELDS), minibatch_order(spec)], sort_keys=True)
