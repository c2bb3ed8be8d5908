"""Per-GPU peak memory of a verl run, estimated before the queue: the formulas, each with its source.

Inputs are a model's shape (`model_shape.ModelShape`, from its config.json) and two frozen option
objects, the update's (`TrainingSetup`) and the rollout's (`RolloutSetup`); outputs are bytes, per GPU, as a
`MemoryEstimate` with one `Phase` per colocated phase (verl's hybrid engine: the rollout sleeps
during the update and the update's states go back to the CPU only where offloaded). Nothing here
reads a file or a spec: `memory_check` turns a run into these inputs.

Sources: verl 0.9.1 (paths inside the `verl` package), torch 2.13, transformers 5.x (Qwen2 / Llama
layers), [ZeRO] Rajbhandari et al. 2020, [K22] Korthikanti et al. 2022 "Reducing Activation
Recomputation", vLLM's KV-cache layout. Accuracy is measured by benchmarks/bench_memory.py.

Length: every term of the per-GPU budget in one file, each beside its source, so a reader checks the
whole estimate in one place (memory_check.py maps a run onto it).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal

from cancelctl.backends.verl.model_shape import ModelShape

GIB = 2**30
FP32, BF16 = 4, 2
# CUDA contexts of the trainer and the rollout server and NCCL buffers on every GPU: an assumption
# (~0.5 GiB a context), not measured here.
RUNTIME_RESERVE = 1.0 * GIB


@dataclass(frozen=True)
class TrainingSetup:
    """What of a verl run's actor update sets its memory (defaults: verl 0.9.1 on GPUs)."""

    strategy: Literal["fsdp", "fsdp2", "megatron"]
    gpus: int  # training ranks
    micro_batch_tokens: int  # tokens of one update micro-batch (rows × (prompt + response), or the dynamic budget)
    log_prob_tokens: int  # tokens of one forward-only (old / reference log-prob) micro-batch
    tensor_parallel: int = 1  # megatron
    pipeline_parallel: int = 1  # megatron
    expert_parallel: int = 1  # megatron: the routed experts split over this many ranks too
    sequence_parallel: int = 1  # ulysses (fsdp) or context parallel (megatron): each sequence's tokens split over ranks
    compute_bytes: int = BF16  # FSDP param_dtype / autocast; 4 with model.dtype fp32
    optimizer: Literal["adamw", "adam", "sgd"] = "adamw"
    gradient_checkpointing: bool = True
    offload_params: bool = False  # verl's param_offload: off the GPU between updates, not during one
    offload_optimizer: bool = False
    cpu_offload_policy: bool = False  # fsdp2 offload_policy: states stay on the CPU through the update
    entropy: bool = False  # entropy_coeff != 0: the update also takes the entropy of the logits
    reference: bool = False  # a KL loss: a reference model's log-probs
    reference_offload: bool = True  # its weights on the CPU (verl forces it for FSDP; megatron follows param_offload)
    attention: Literal["flash_attention_2", "sdpa"] = "flash_attention_2"
    flash_cross_entropy: bool = True  # flash-attn's in-place cross entropy (installed with verl on GPUs)
    compiled_entropy: bool = True  # fsdp_config.use_torch_compile: the entropy in one fused kernel
    fused_kernels: bool = False  # model.use_fused_kernels: log-probs and entropy from the hidden states, in chunks
    foreach_optimizer: bool = True  # torch's default on CUDA; the CPU steps parameter by parameter

    @property
    def model_parallel(self) -> int:
        return self.tensor_parallel * self.pipeline_parallel if self.strategy == "megatron" else 1

    @property
    def data_parallel(self) -> int:
        return max(1, self.gpus // (self.model_parallel * (self.sequence_parallel if self.strategy == "megatron" else 1)))

    @property
    def optimizer_shards(self) -> int:
        """Megatron's distributed optimizer shards over data x context parallel ranks: megatron-core's
        get_megatron_optimizer builds it on `intra_dp_cp_group` (optimizer/__init__.py), the group its
        DDP reduces gradients over (context-parallel ranks hold the same weights, different tokens)."""
        return max(1, self.gpus // self.model_parallel)


@dataclass(frozen=True)
class RolloutSetup:
    """What of a verl run's rollout (vLLM / SGLang, colocated) sets its memory."""

    tensor_parallel: int
    gpu_memory_utilization: float
    sequence_tokens: int  # prompt + response of one sequence
    sequences: int  # sequences one engine replica generates in a step
    max_num_seqs: int = 256  # verl's rollout.max_num_seqs
    max_num_batched_tokens: int = 8192  # verl's rollout.max_num_batched_tokens


@dataclass(frozen=True)
class Phase:
    """One phase's peak on one GPU: its parts, largest first when shown."""

    name: str
    parts: tuple[tuple[str, float], ...]
    peak_of: str = ""  # which of the phase's moments this is (the update's: a backward, the step, a log-prob pass)

    @property
    def total(self) -> float:
        return sum(b for _, b in self.parts)

    def breakdown(self) -> str:
        shown = sorted((p for p in self.parts if p[1] >= 0.05 * GIB), key=lambda p: -p[1])
        rest = self.total - sum(b for _, b in shown)
        items = [f"{what} {gib(b)}" for what, b in shown] + ([f"other {gib(rest)}"] if rest >= 0.05 * GIB else [])
        name = f"{self.name} ({self.peak_of})" if self.peak_of else self.name
        return f"{name} {gib(self.total)} GiB = " + " + ".join(items)

    def to_json(self) -> dict[str, Any]:
        return {"gib": round(self.total / GIB, 2), **({"peak_of": self.peak_of} if self.peak_of else {}),
                "parts_gib": {what: round(b / GIB, 3) for what, b in self.parts}}


@dataclass(frozen=True)
class KvCache:
    """The rollout engine's KV-cache pool against what a step's sequences need (per replica)."""

    pool: float  # bytes left for the KV cache in the engine's share of the GPU
    per_sequence: float  # bytes of one full-length sequence
    sequences: int  # sequences the engine holds at once (a step's share, at most max_num_seqs)

    @property
    def fits_one(self) -> bool:
        return self.pool >= self.per_sequence

    @property
    def holds(self) -> int:
        return int(self.pool // self.per_sequence) if self.per_sequence else self.sequences


@dataclass(frozen=True)
class MemoryEstimate:
    gpu_bytes: float
    train: Phase
    rollout: Phase
    kv_cache: KvCache

    @property
    def peak(self) -> float:
        return max(self.train.total, self.rollout.total)

    def summary(self) -> str:
        """"train 14.2 GiB, rollout 62.2 GiB of 80"."""
        return f"train {gib(self.train.total)} GiB, rollout {gib(self.rollout.total)} GiB of {self.gpu_bytes / GIB:g}"

    def to_json(self) -> dict[str, Any]:
        return {"gpu_gib": round(self.gpu_bytes / GIB, 2), "peak_gib": round(self.peak / GIB, 2),
                "train": self.train.to_json(), "rollout": self.rollout.to_json(),
                "kv_cache": {"pool_gib": round(self.kv_cache.pool / GIB, 2),
                             "sequence_gib": round(self.kv_cache.per_sequence / GIB, 4),
                             "sequences": self.kv_cache.sequences, "holds": self.kv_cache.holds}}


def gib(n: float) -> str:
    return f"{n / GIB:.1f}"


# ---------------------------------------------------------------- training: model states


def model_states(shape: ModelShape, s: TrainingSetup) -> dict[str, float]:
    """Parameters, gradients and optimizer states one GPU holds during the update.

    FSDP / FSDP2 (full shard over every rank, verl's fsdp_size -1): fp32 parameters (verl trains in
    fp32, workers/engine/fsdp/transformer_impl.py:258-262), fp32 gradients (reduce_dtype fp32,
    :391-399), Adam's two fp32 moments: 4 + 4 + 8 = 16 bytes a parameter, the [ZeRO] §3 mixed-precision
    Adam count, all divided by the ranks. param_offload / optimizer_offload bring them back to the
    GPU for the whole update (workers/engine/base.py:314-336), so only fsdp2's offload_policy keeps
    them off it (transformer_impl.py:458-463). Megatron: bf16 weights and fp32 gradients per
    tensor x pipeline shard (grad_reduce_in_fp32, utils/megatron_utils.py:104), fp32 master weights
    and moments over data x context parallel ranks too (use_distributed_optimizer: Megatron-LM's
    distrib_optimizer.md, 6 + 12/d bytes; d counts context-parallel ranks, `optimizer_shards`).
    """
    moments = 0 if s.optimizer == "sgd" else 2 * FP32  # verl's SGD has no momentum state
    if s.strategy == "megatron":
        shard = megatron_shard(shape, s)
        return {"weights": BF16 * shard, "gradients": FP32 * shard,
                "optimizer": (FP32 + moments) * shard / s.optimizer_shards}
    if s.cpu_offload_policy:
        return {"weights": 0.0, "gradients": 0.0, "optimizer": 0.0}
    shard = shape.params / s.gpus
    return {"weights": FP32 * shard, "gradients": FP32 * shard, "optimizer": moments * shard}


def megatron_shard(shape: ModelShape, s: TrainingSetup) -> float:
    """Parameters on one Megatron rank: all over tensor x pipeline ranks, the routed experts over expert
    ranks too (expert tensor parallel defaults to tensor parallel)."""
    return (shape.params + shape.expert_params * (1 / s.expert_parallel - 1)) / s.model_parallel


def reference_weights(shape: ModelShape, s: TrainingSetup) -> float:
    """The KL loss's reference model on the GPU in every phase: Megatron's bf16 shard unless its
    param_offload (the ref's follows the actor's, trainer/config/_generated_ppo_megatron_trainer.yaml:256);
    FSDP keeps it on the CPU whatever the config says (forward_only, transformer_impl.py:424-434,
    458-463), so only its gathered unit while it runs, less than the actor's own log-prob pass."""
    if not s.reference or s.reference_offload or s.strategy != "megatron":
        return 0.0
    return BF16 * megatron_shard(shape, s)


def resident_between_updates(shape: ModelShape, s: TrainingSetup) -> float:
    """What of the update stays on the GPU while the rollout runs: weights and optimizer states unless
    offloaded (verl offloads at the update's end, workers/engine/base.py:334-336, and after the weight
    sync, workers/engine_workers.py:810-812); gradients are freed (zero_grad on leaving train mode,
    transformer_impl.py:1138-1139) except Megatron's contiguous gradient buffer, offloaded with the weights."""
    states = model_states(shape, s)
    kept = 0.0 if s.offload_params else states["weights"] + (states["gradients"] if s.strategy == "megatron" else 0.0)
    return kept + (0.0 if s.offload_optimizer else states["optimizer"]) + reference_weights(shape, s)


def gathered_weights(shape: ModelShape, s: TrainingSetup, *, backward: bool = True) -> float:
    """FSDP's unsharded copies in the compute dtype while a unit runs: the largest unit, the root (with
    tied embeddings it holds embed_tokens = lm_head and is not resharded after the forward:
    verl/utils/fsdp_utils.py:549-600) and, in a backward, the next unit (FSDP2 prefetches it), the
    unit's unsharded gradient before its reduce-scatter (compute dtype, cast to fp32 to reduce) and the
    root's. Megatron holds its shards whole: none."""
    if s.strategy == "megatron":
        return 0.0
    unit = max(shape.layer_params, 0 if shape.tied_embeddings else shape.embedding_params)
    root = shape.embedding_params if shape.tied_embeddings else 0
    if not backward:
        return s.compute_bytes * (unit + root)
    return s.compute_bytes * (2 * unit + root) + (s.compute_bytes + FP32) * unit + s.compute_bytes * root


# ---------------------------------------------------------------- training: activations and logits


def layer_activations_per_token(shape: ModelShape, s: TrainingSetup) -> float:
    """Bytes one decoder layer keeps for its backward, per token ([K22] §4.1's count, redone for a
    Llama/Qwen layer without dropout and with flash attention, so no s² term):
    - each of the 2 RMSNorms: its input upcast to fp32 (4h), the normalised and scaled outputs in the
      compute dtype (2·c·h) (transformers' Qwen2RMSNorm: `.to(float32)`, `weight * x.to(dtype)`);
    - attention: q and k after RoPE, v, the attention output (q + 2·kv + q, q = heads·head_dim: the
      hidden size in Qwen2, twice it in Qwen3-30B-A3B); with sdpa the output is copied for o_proj
      (`transpose(1, 2).contiguous()`, integrations/sdpa_attention.py), one more q;
    - the MLP of a token's experts: gate, act(gate), up, act·up (4·I; 2·I without a gate).
    """
    h, c = shape.hidden, s.compute_bytes
    norms = 2 * (FP32 * h + 2 * c * h)
    q = shape.q_width
    attention = c * (2 * q + 2 * shape.kv_width + (q if s.attention == "sdpa" else 0))
    mlp = c * (4 if shape.gated_mlp else 2) * shape.active_intermediate
    return norms + attention + mlp


def layer_forward_per_token(shape: ModelShape, s: TrainingSetup) -> float:
    """A forward-only (no_grad) layer's working set per token: its input and output, and the MLP's
    gate, up and their product alive together (3·I; 2·I without a gate), in the compute dtype."""
    return s.compute_bytes * (2 * shape.hidden + (3 if shape.gated_mlp else 2) * shape.active_intermediate)


def stored_activations(shape: ModelShape, s: TrainingSetup, tokens: float) -> float:
    """The layers' saved activations of one micro-batch when its backward begins.

    Without checkpointing every layer keeps `layer_activations_per_token`; with it ([K22] §5, full
    recomputation) each keeps only its input (c·h, HF's per-layer checkpoint), and one layer at a time
    is recomputed later, once the logits are freed (`backward_working_set`). Megatron divides by
    tensor parallel (sequence parallel, [K22] eq. 4); under pipeline parallel the first stage holds
    `pipeline_parallel` micro-batches of its L/p layers (1F1B), as many layers' worth as without it."""
    per_layer = s.compute_bytes * shape.hidden if s.gradient_checkpointing else layer_activations_per_token(shape, s)
    return tokens * shape.layers * per_layer / _activation_split(s)


def backward_working_set(shape: ModelShape, s: TrainingSetup, tokens: float) -> float:
    """What one layer's backward adds beside the stored activations: its recomputed activations under
    checkpointing, and the gradients alive inside it (the MLP's act·up, then act(gate) and up: 2·I,
    and the residual stream's h, in the compute dtype)."""
    recomputed = layer_activations_per_token(shape, s) if s.gradient_checkpointing else 0.0
    gradients = s.compute_bytes * (2 * shape.active_intermediate + shape.hidden)
    return tokens * (recomputed + gradients) / _activation_split(s)


def _activation_split(s: TrainingSetup) -> int:
    return s.tensor_parallel if s.strategy == "megatron" else 1


def logits_bytes(shape: ModelShape, s: TrainingSetup, tokens: float, *, backward: bool, entropy: bool) -> float:
    """The vocabulary-wide tensors of one micro-batch (the largest term for small models).

    lm_head's output stays in the compute dtype (transformers' Qwen2ForCausalLM does not upcast; verl
    scales it by the temperature only when it is not 1, workers/engine/fsdp/transformer_impl.py:98-103).
    Log-probs: with flash-attn (verl/utils/torch_functional.py:95-101) its cross entropy writes the
    gradient into the logits in place: 1 copy; without it `logprobs_from_logits_v2` (:173-206)
    takes per-row logsumexps whose backward adds the gathered gradient and the rows' softmax: the
    logits and 2 fp32 gradients. The entropy (entropy_from_logits, :231-246) keeps the softmax for its
    backward, has a gradient of its own and stops the in-place backward (transformer_impl.py:1425-1427):
    3 more copies. A
    forward-only pass (θ_old's log-probs take the entropy) keeps the logits and the entropy's working
    copy: under torch.compile (fsdp_config.use_torch_compile, transformer_impl.py:182-186) one fused
    kernel, which still writes exp(logits − max) in fp32 as a buffer the logits' size (torch 2.13
    inductor's generated code for entropy_from_logits, dynamic=True, a bf16 input: one
    `empty_strided((s0, s1), float32)` beside the per-row reductions), else the softmax and a
    logsumexp temporary (2 in the compute dtype).

    Megatron: the output layer's logits are vocab-parallel over tensor ranks, in the compute dtype, and
    never chunked unless use_fused_kernels (workers/engine/megatron/transformer_impl.py:1191-1241,
    the default: model.use_fused_kernels false). Its log-probs are megatron-core's
    vocab_parallel_cross_entropy (verl/utils/megatron/tensor_parallel.py:201-205): an fp32 copy of the
    logits (`calculate_logits_max`, `.float()`), exponentiated and normalised in place and kept as the
    softmax for the backward, which turns it into the gradient in place and casts it back: logits + fp32
    in a forward, fp32 + its compute-dtype cast in a backward (c + 4 either way). The entropy
    (transformer_impl.py:1214-1231) first clones the logits (kept for the log-probs) and runs
    _VocabParallelEntropy (tensor_parallel.py:109-139): a shifted copy exponentiated and normalised in
    place, which with a backward it keeps with the logits. So a forward-only pass with the entropy
    (θ_old's) peaks at the logits, their clone and the fp32 copy (2c + 4: the entropy's copy is freed
    before the fp32 one is made); an update with it keeps the logits and the softmax, makes the clone
    and the fp32 copy, and in the backward adds the entropy's gradient: 4c + 4."""
    c = s.compute_bytes
    if s.fused_kernels:
        return fused_logits_bytes(shape, s, tokens, backward=backward)
    if s.strategy == "megatron":
        if entropy:
            per = (4 * c if backward else 2 * c) + FP32
        else:
            per = c + FP32
        return tokens * shape.vocab * per / s.tensor_parallel
    if not backward:
        copies = c + ((FP32 if s.compiled_entropy else 2 * c) if entropy else 0)
    elif s.flash_cross_entropy:
        copies = c * (4 if entropy else 1)
    else:
        copies = c + 2 * FP32 + (3 * c if entropy else 0)
    return tokens * shape.vocab * copies


FUSED_CHUNK_TOKENS = 512  # verl/utils/experimental/torch_functional.py:104, FusedLinearForPPOFunction
FUSED_VOCAB_SPLIT = 1024  # verl/utils/kernel/kernels.py:620, 1572 (vocab_per_split)


def fused_logits_bytes(shape: ModelShape, s: TrainingSetup, tokens: float, *, backward: bool) -> float:
    """model.use_fused_kernels: the log-probs and the entropy come from the hidden states and lm_head's
    weight without the logits. FSDP (impl_backend torch, trainer/config/model/hf_model.yaml:68):
    FusedLinearForPPOFunction runs 512 tokens at a time, each chunk's logits in fp32 with their softmax
    and, in a backward, their gradient (utils/experimental/torch_functional.py:96-216). Megatron
    (models/mcore/model_forward_fused.py → utils/kernel/linear_cross_entropy.py): the Triton kernel keeps
    three fp32 numbers per token and 1024-wide vocabulary split (kernels.py:620-626), and its default
    backward (_Split_Dlogits_N, kernels.py:168) one split of the logits' gradient at a time."""
    c = s.compute_bytes
    if s.strategy == "megatron":
        vocab = shape.vocab / s.tensor_parallel
        splits = -(-vocab // FUSED_VOCAB_SPLIT)
        return tokens * (3 * FP32 * splits + (c * FUSED_VOCAB_SPLIT if backward else 0))
    return min(tokens, FUSED_CHUNK_TOKENS) * shape.vocab * FP32 * (3 if backward else 2)


def optimizer_step_transient(shape: ModelShape, s: TrainingSetup) -> float:
    """Adam's step: torch's foreach implementation (the default on CUDA) makes one fp32 temporary of
    every local parameter for sqrt(v) (torch/optim/adam.py:762, `_multi_tensor_adam`); the
    per-parameter loop (CPU) one of the largest parameter. Megatron's fused Adam: none."""
    if s.optimizer == "sgd" or s.strategy == "megatron" or s.cpu_offload_policy:
        return 0.0
    if s.foreach_optimizer:
        return FP32 * shape.params / s.gpus
    return FP32 * max(shape.embedding_params, shape.hidden * shape.active_intermediate) / s.gpus


def update_phases(shape: ModelShape, s: TrainingSetup) -> dict[str, Phase]:
    """The update's three peaks: a micro-batch's backward, the optimizer step, and the forward-only
    log-prob pass (θ_old's, with the entropy: trainer/ppo/v1/trainer_base.py:1650-1658, in micro-batches
    of rollout.log_prob_micro_batch_size_per_gpu rows, workers/engine_workers.py:620-624, 406-411; the
    reference model's pass is no larger, `reference_weights`).

    Context parallel (megatron) splits every sequence's tokens over its ranks before the first layer
    (verl's preprocess_thd_engine: 2 x CP zigzag chunks a sequence, models/mcore/util.py), so each GPU
    runs all layers and the output layer on 1/CP of the micro-batch's tokens: activations and logits
    divide by CP. Only the per-token log-probs and entropy are all-gathered after the logits
    (postprocess_thd_engine, util.py:604-610), vectors of one number a token. Ulysses (FSDP) likewise
    splits the tokens between its all-to-alls."""
    states = [(f"actor {k}", v) for k, v in model_states(shape, s).items()]
    if reference := reference_weights(shape, s):
        states.append(("reference weights", reference))
    tokens = s.micro_batch_tokens / s.sequence_parallel
    gathered = gathered_weights(shape, s)
    logits = logits_bytes(shape, s, tokens, backward=True, entropy=s.entropy)
    layer = backward_working_set(shape, s, tokens)
    # the logits and their gradient are freed before the first layer's backward begins
    later = ("logits", logits) if logits >= layer else ("layer backward", layer)
    backward = Phase("update", (*states, ("gathered weights", gathered),
                                ("activations", stored_activations(shape, s, tokens)), later))
    step = Phase("optimizer step", (*states, ("optimizer step", optimizer_step_transient(shape, s))))
    lp_tokens = s.log_prob_tokens / s.sequence_parallel
    kept = [(k, v) for k, v in states if _kept_for_log_prob(k, s)]
    one_layer = lp_tokens * layer_forward_per_token(shape, s) / _activation_split(s)
    log_prob = Phase("log-prob", (*kept, ("gathered weights", gathered_weights(shape, s, backward=False)),
                                  ("logits", logits_bytes(shape, s, lp_tokens, backward=False, entropy=True)),
                                  ("activations", one_layer)))
    return {p.name: p for p in (backward, step, log_prob)}


def _kept_for_log_prob(state: str, s: TrainingSetup) -> bool:
    """What of the update's states is on the GPU during a log-prob pass: verl's eval mode brings back
    only the weights (workers/engine/base.py:314-336: `to(model=param_offload, optimizer=False,
    grad=False)`); the optimizer states are there unless optimizer_offload moved them out at the last
    update's end, and Megatron's contiguous gradient buffer unless param_offload did (FSDP frees its
    gradients: `resident_between_updates`)."""
    if state == "actor optimizer":
        return not s.offload_optimizer
    if state == "actor gradients":
        return s.strategy == "megatron" and not s.offload_params
    return True


# ---------------------------------------------------------------- rollout


def kv_cache_per_token(shape: ModelShape, tensor_parallel: int, dtype_bytes: int = BF16) -> float:
    """vLLM's KV cache: K and V of every layer, 2·layers·kv_heads·head_dim·bytes per token
    (vllm/v1/kv_cache_interface.py, AttentionSpec.page_size_bytes), kv heads split over tensor
    ranks (replicated when there are more ranks than heads)."""
    kv_heads = max(1, shape.kv_heads // tensor_parallel)
    return 2 * shape.layers * kv_heads * shape.head_dim * dtype_bytes


def engine_activations(shape: ModelShape, r: RolloutSetup) -> float:
    """What vLLM's start-up profile run reserves beside weights and KV cache: a forward over
    max_num_batched_tokens (hidden states, gate+up and the activated MLP, bf16) and the sampler's fp32
    logits and probabilities over max_num_seqs rows (gpu_model_runner.profile_run)."""
    forward = r.max_num_batched_tokens * BF16 * (2 * shape.hidden + 3 * shape.active_intermediate) / r.tensor_parallel
    sampler = r.max_num_seqs * shape.vocab * 2 * FP32
    return forward + sampler


def rollout_phase(shape: ModelShape, r: RolloutSetup, gpu_bytes: float, resident: float) -> tuple[Phase, KvCache]:
    """The rollout's peak: vLLM / SGLang take `gpu_memory_utilization` of the whole GPU (vLLM's worker:
    requested memory = total × utilization) for bf16 weights / tensor parallel, their profile run's
    activations and the KV cache in what is left; beside them stays what the update did not offload."""
    share = r.gpu_memory_utilization * gpu_bytes
    weights = BF16 * shape.params / r.tensor_parallel
    reserve = engine_activations(shape, r)
    pool = max(0.0, share - weights - reserve)  # none left: the engine cannot start (memory_check refuses)
    kv = KvCache(pool, r.sequence_tokens * kv_cache_per_token(shape, r.tensor_parallel), min(r.sequences, r.max_num_seqs))
    parts = (("engine weights", weights), ("engine activations", reserve), ("KV cache", pool),
             ("actor states kept", resident), ("runtime", RUNTIME_RESERVE))
    return Phase("rollout", parts), kv


def estimate(shape: ModelShape, training: TrainingSetup, rollout: RolloutSetup, gpu_bytes: float) -> MemoryEstimate:
    """Both phases on one GPU. The update's phase is the largest of its three peaks, with the sleeping
    rollout engine's and the trainer's runtime beside it (verl frees the engine's weights and KV cache
    before the update: free_cache_engine, workers/engine_workers.py:770-824)."""
    phases = update_phases(shape, training)
    worst = max(phases.values(), key=lambda p: p.total)
    train = Phase("train", (*worst.parts, ("runtime", RUNTIME_RESERVE)), peak_of=worst.name)
    roll, kv = rollout_phase(shape, rollout, gpu_bytes, resident_between_updates(shape, training))
    return MemoryEstimate(gpu_bytes, train, roll, kv)
