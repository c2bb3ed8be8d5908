"""Test support: verl 0.9.1's real actor update on CPU or one GPU, one process, scenarios batched.

`python verl_actor_run.py SCENARIOS.json OUT_DIR` (run by test_verl_actor.py in a subprocess with the
env of `run_env()`): builds a tiny random Qwen2 and a WordLevel tokenizer (no download), then for each
scenario an `ActorRolloutRefWorker(role="actor")` with `init_model()`, and calls `compute_log_prob` and
`update_actor` as the trainer does (trainer/ppo/ray_trainer.py:1290-1369) on one fixed batch:
FSDP2 engine → `ppo_loss` → the registered policy loss. Writes OUT_DIR/<name>.pt with the parameter
change and OUT_DIR/results.json with the step metrics, the precision it ran in (or the error) per scenario.

Device (`selected_device()`, from CANCELCTL_TEST_VERL_DEVICE): `cpu` (default) is cancelctl's CPU
platform, gloo, fp32 throughout; `cuda` is what a user runs on a GPU: verl's own platform, its own
"cpu:gloo,cuda:nccl" process group, and verl's default FSDP mixed precision (bf16 compute, fp32
parameters and gradient reduction).

Scenario: {"name", "loss_mode", "micro_batch": rows per micro-batch, "policy_loss": {extra fields},
"dynamic_bsz": bool, "mini_batch_prompts": int, "rollout_log_probs": bool}.
"""

from __future__ import annotations

import json
import os
import sys
import time
import traceback
from pathlib import Path

HERE = Path(__file__).resolve().parent
# The model's size (the benchmark's --model): "HIDDENxLAYERSxRESPONSE_LENxVOCAB"; the test's is tiny.
MODEL_ENV = "CANCELCTL_TEST_VERL_MODEL"
TINY_MODEL = "64x2x10x256"
HIDDEN, LAYERS, RESPONSE_LEN, VOCAB = (int(n) for n in os.environ.get(MODEL_ENV, TINY_MODEL).split("x"))
PROMPTS, G, PROMPT_LEN = 8, 4, 6
SEQ_LEN = max(64, PROMPT_LEN + RESPONSE_LEN)  # the model's positions and the dynamic batches' token cap
DEVICE_ENV = "CANCELCTL_TEST_VERL_DEVICE"
DEVICES = ("cpu", "cuda")


def selected_device() -> str:
    """The device of the actor update, from DEVICE_ENV: `cpu` (the default) or `cuda`."""
    device = os.environ.get(DEVICE_ENV, "cpu")
    if device not in DEVICES:
        raise ValueError(f"{DEVICE_ENV}={device!r}: expected one of {', '.join(DEVICES)}")
    return device


def single_process_env(port: int) -> dict[str, str]:
    """torch.distributed's environment of a one-process (world size 1) run."""
    return {
        "RANK": "0",
        "LOCAL_RANK": "0",
        "WORLD_SIZE": "1",
        "LOCAL_WORLD_SIZE": "1",
        "MASTER_ADDR": "127.0.0.1",
        "MASTER_PORT": str(port),
        "OMP_NUM_THREADS": "1",
        "TOKENIZERS_PARALLELISM": "false",
    }


def cpu_env(port: int) -> dict[str, str]:
    """Environment of a one-process verl run on cancelctl's `cpu` platform (cancelctl.backends.verl.cpu,
    loaded by the `verl.plugins` entry point: nothing on PYTHONPATH)."""
    from cancelctl.backends.verl.cpu.overrides import CPU_ENV

    return {
        "VERL_PLATFORM": CPU_ENV["VERL_PLATFORM"],
        "VERL_ENGINE_DEVICE": CPU_ENV["VERL_ENGINE_DEVICE"],  # the FSDP LM engine is registered for cuda/npu only
        **single_process_env(port),
        "CUDA_VISIBLE_DEVICES": "",
    }


def run_env(device: str, port: int) -> dict[str, str]:
    """Environment of this runner's subprocess on `device`, the device choice included. On cuda verl
    detects its own platform ("nvidia") and registers its FSDP engine for it: nothing to set but
    torch.distributed's variables."""
    env = cpu_env(port) if device == "cpu" else single_process_env(port)
    return {**env, DEVICE_ENV: device}


def build_model(path: Path) -> None:
    """A random Qwen2 (by default 2 layers, hidden 64, vocab 256: MODEL_ENV) and a WordLevel tokenizer
    over its vocabulary."""
    import torch
    from tokenizers import Tokenizer, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast, Qwen2Config, Qwen2ForCausalLM

    vocab = {f"t{i}": i for i in range(VOCAB - 3)} | {"<unk>": VOCAB - 3, "<pad>": VOCAB - 2, "<eos>": VOCAB - 1}
    tok = Tokenizer(models.WordLevel(vocab=vocab, unk_token="<unk>"))
    tok.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    PreTrainedTokenizerFast(tokenizer_object=tok, unk_token="<unk>", pad_token="<pad>", eos_token="<eos>").save_pretrained(
        path
    )
    config = Qwen2Config(
        vocab_size=VOCAB,
        hidden_size=HIDDEN,
        intermediate_size=2 * HIDDEN,
        num_hidden_layers=LAYERS,
        num_attention_heads=max(4, HIDDEN // 64),
        num_key_value_heads=max(2, HIDDEN // 128),
        max_position_embeddings=SEQ_LEN,
        tie_word_embeddings=False,
        pad_token_id=VOCAB - 2,
        eos_token_id=VOCAB - 1,
        bos_token_id=VOCAB - 1,
    )
    torch.manual_seed(0)
    Qwen2ForCausalLM(config).save_pretrained(path)


BASE_LINES = [
    "actor_rollout_ref.model.use_remove_padding=False",
    "+actor_rollout_ref.model.override_config.attn_implementation=sdpa",
    "actor_rollout_ref.model.enable_gradient_checkpointing=False",
    "actor_rollout_ref.actor.strategy=fsdp2",
    "actor_rollout_ref.actor.fsdp_config.use_torch_compile=False",
    f"actor_rollout_ref.rollout.n={G}",
    "actor_rollout_ref.rollout.log_prob_micro_batch_size_per_gpu=8",
    "actor_rollout_ref.actor.use_kl_loss=False",
    "actor_rollout_ref.actor.entropy_coeff=0",
    "actor_rollout_ref.actor.clip_ratio_low=0.2",
    "actor_rollout_ref.actor.clip_ratio_high=0.28",
    "actor_rollout_ref.actor.optim.optimizer=SGD",
    "actor_rollout_ref.actor.optim.lr=1.0",
    "actor_rollout_ref.actor.optim.weight_decay=0",
    "actor_rollout_ref.actor.optim.clip_grad=1e9",
    "actor_rollout_ref.actor.optim.total_training_steps=10",
    "actor_rollout_ref.actor.policy_loss._target_=cancelctl.backends.verl.config.CancelPolicyLossConfig",
]
# FSDP mixed precision per device. cpu: fp32 throughout. cuda: none given, so verl's default applies
# (workers/engine/fsdp/transformer_impl.py `_build_fsdp_module`: param_dtype bf16 — the forward, the
# backward and the loss under bf16 autocast — reduce and buffers fp32, parameters kept in fp32).
PRECISION_LINES = {
    "cpu": [
        "+actor_rollout_ref.actor.fsdp_config.mixed_precision={param_dtype:fp32,reduce_dtype:fp32,buffer_dtype:fp32}"
    ],
    "cuda": [],
}
_base_config = None


def actor_config(model_path: Path, scenario: dict, device: str):
    """verl's ppo_trainer config (composed once: ~2 s) with this scenario's settings."""
    import copy

    from hydra import compose, initialize_config_dir
    from omegaconf import OmegaConf, open_dict

    import verl

    global _base_config
    if _base_config is None:
        config_dir = Path(verl.__file__).parent / "trainer" / "config"
        with initialize_config_dir(config_dir=str(config_dir), version_base=None):
            _base_config = compose(config_name="ppo_trainer", overrides=BASE_LINES + PRECISION_LINES[device])
    cfg = copy.deepcopy(_base_config)
    settings = {
        "model.path": str(model_path),
        "actor.ppo_mini_batch_size": scenario.get("mini_batch_prompts", PROMPTS),
        "actor.ppo_micro_batch_size_per_gpu": scenario.get("micro_batch", 8),
        "actor.use_dynamic_bsz": scenario.get("dynamic_bsz", False),
        "actor.ppo_max_token_len_per_gpu": scenario.get("max_tokens", SEQ_LEN),
        "actor.policy_loss.loss_mode": scenario["loss_mode"],
        **{f"actor.policy_loss.{k}": v for k, v in scenario.get("policy_loss", {}).items()},
    }
    with open_dict(cfg):
        for key, value in settings.items():
            OmegaConf.update(cfg, f"actor_rollout_ref.{key}", value, force_add=True)
    OmegaConf.resolve(cfg)
    return cfg


def build_batch(tokenizer_pad: int, rollout_log_probs: bool, pad_rows: int = 0):
    """8 prompts × G 4, left-padded prompts, right-padded responses of varied length, group rewards.
    `pad_rows`: the last rows become verl V1 padding rows (one `pad<hex>` uid, zero-token response,
    trainer/ppo/padding_utils.py:144-190)."""
    import torch
    from verl import DataProto

    gen = torch.Generator().manual_seed(1)
    n = PROMPTS * G
    prompt_lens = torch.randint(3, PROMPT_LEN + 1, (PROMPTS,), generator=gen).repeat_interleave(G)
    response_lens = torch.randint(2, RESPONSE_LEN + 1, (n,), generator=gen)
    prompts = torch.full((n, PROMPT_LEN), tokenizer_pad)
    responses = torch.full((n, RESPONSE_LEN), tokenizer_pad)
    prompt_tokens = torch.randint(0, VOCAB - 3, (PROMPTS, PROMPT_LEN), generator=gen).repeat_interleave(G, 0)
    for i in range(n):
        prompts[i, PROMPT_LEN - prompt_lens[i] :] = prompt_tokens[i, : prompt_lens[i]]
        responses[i, : response_lens[i]] = torch.randint(0, 24, (int(response_lens[i]),), generator=gen)  # skewed freq
    prompt_mask = prompts != tokenizer_pad
    response_mask = (torch.arange(RESPONSE_LEN)[None] < response_lens[:, None]).long()
    attention_mask = torch.cat([prompt_mask.long(), response_mask], 1)
    position_ids = (attention_mask.cumsum(1) - 1).clamp(min=0)
    rewards = torch.randint(0, 2, (PROMPTS, G), generator=gen).float()
    rewards[0] = torch.tensor([1.0, 0.0, 0.0, 0.0])
    adv = (rewards - rewards.mean(1, keepdim=True)) / (rewards.std(1, keepdim=True) + 1e-6)
    advantages = adv.reshape(n, 1) * response_mask
    tensors = {
        "prompts": prompts,
        "responses": responses,
        "input_ids": torch.cat([prompts, responses], 1),
        "attention_mask": attention_mask,
        "position_ids": position_ids,
        "response_mask": response_mask,
        "advantages": advantages.float(),
    }
    uids = [f"q{i // G}" for i in range(n)]
    if pad_rows:
        response_mask[-pad_rows:] = 0
        attention_mask[-pad_rows:, PROMPT_LEN:] = 0
        advantages[-pad_rows:] = 0
        uids[-pad_rows:] = ["pad5e1f"] * pad_rows
    batch = DataProto.from_dict(tensors=tensors, non_tensors={"uid": uids})
    return batch, rollout_log_probs


def run_scenario(model_path: Path, scenario: dict, out_dir: Path, device: str) -> dict:
    """Build the worker and take the scenario's steps; saves the parameter change."""
    case = Case(model_path, scenario, device)
    for _ in range(scenario.get("steps", 2)):  # step 2 is off-policy: the clips act
        case.step()
    return case.finish(out_dir)


class Case:
    """One scenario's worker, batch and θ_old log-probs; `step()` is one timed `update_actor` call."""

    def __init__(self, model_path: Path, scenario: dict, device: str):
        import torch
        from verl.utils import tensordict_utils as tu
        from verl.workers.engine_workers import ActorRolloutRefWorker
        from verl.workers.utils.padding import left_right_2_no_padding, no_padding_2_padding

        # verl would ask for "cpu:gloo,cpu:gloo" (utils/distributed.py:89); on cuda its own "cpu:gloo,cuda:nccl"
        if device == "cpu" and not torch.distributed.is_initialized():
            torch.distributed.init_process_group(backend="gloo", rank=0, world_size=1)
        self.scenario = scenario
        self.timings: list[float] = []
        self.metrics: dict = {}
        t0 = time.perf_counter()
        cfg = actor_config(model_path, scenario, device)
        t1 = time.perf_counter()
        self.worker = ActorRolloutRefWorker(config=cfg.actor_rollout_ref, role="actor")
        self.worker.init_model()
        self.setup = [t1 - t0, time.perf_counter() - t1]
        self.precision = _precision(self.worker.actor.engine)
        self.before = _params(self.worker.actor.engine.module)
        batch, with_rollout = build_batch(VOCAB - 2, scenario.get("rollout_log_probs", True), scenario.get("pad_rows", 0))
        td = left_right_2_no_padding(batch.to_tensordict())
        tu.assign_non_tensor(
            td, calculate_entropy=True, calculate_sum_pi_squared=False, compute_loss=False, temperature=1.0
        )
        output = self.worker.compute_log_prob(td)
        old = no_padding_2_padding(tu.get(output, "log_probs"), td).float()
        batch.batch["old_log_probs"] = old
        if with_rollout:  # an inference engine's log-probs: θ_old's plus a small mismatch
            noise = torch.randn(old.shape, generator=torch.Generator().manual_seed(2)) * 0.05
            batch.batch["rollout_log_probs"] = old + noise * batch.batch["response_mask"]
        self.batch = batch

    def step(self) -> None:
        from verl.utils import tensordict_utils as tu
        from verl.workers.utils.padding import left_right_2_no_padding

        mini = self.scenario.get("mini_batch_prompts", PROMPTS) * G
        td = left_right_2_no_padding(self.batch.to_tensordict())
        tu.assign_non_tensor(  # what the trainer's _update_actor adds (ray_trainer.py:1355-1366)
            td,
            calculate_entropy=False,
            distillation_use_topk=False,
            distillation_only=False,
            global_batch_size=mini,
            mini_batch_size=mini,
            epochs=1,
            seed=42,
            dataloader_kwargs={"shuffle": False},
            compute_loss=True,
            temperature=1.0,
        )
        start = time.perf_counter()
        out = self.worker.update_actor(td)
        self.timings.append(time.perf_counter() - start)
        self.metrics = {k: _number(v) for k, v in tu.get(out, "metrics").items()}

    def finish(self, out_dir: Path) -> dict:
        import torch

        after = _params(self.worker.actor.engine.module)
        torch.save({k: after[k] - self.before[k] for k in after}, out_dir / f"{self.scenario['name']}.pt")
        return {
            "metrics": self.metrics,
            "seconds": self.timings,
            "rows": PROMPTS * G,
            "setup": self.setup,
            "precision": self.precision,
        }


def run_round_robin(model_path: Path, scenarios: list[dict], out_dir: Path, steps: int, device: str) -> dict:
    """Benchmark mode: every scenario's worker first, then `steps` rounds of one step each, so a
    machine-load drift hits every case alike."""
    cases = [Case(model_path, sc, device) for sc in scenarios]
    for _ in range(steps):
        for case in cases:
            case.step()
    return {case.scenario["name"]: case.finish(out_dir) for case in cases}


def _params(module) -> dict:
    """Full fp32 copies of the parameters, on the CPU (FSDP2 holds DTensors)."""
    out = {}
    for key, value in module.state_dict().items():
        value = value.full_tensor() if hasattr(value, "full_tensor") else value
        out[key] = value.detach().clone().float().cpu()
    return out


def _precision(engine) -> dict:
    """Where and in what the engine computes: its parameters' device and dtype, and the dtype of its
    forward, backward and loss (the FSDP mixed-precision param_dtype, which verl also autocasts to)."""
    param = next(engine.module.parameters())
    return {
        "device": param.device.type,
        "params": str(param.dtype).removeprefix("torch."),
        "compute": str(engine._autocast_dtype).removeprefix("torch."),
    }


def _number(value):
    import torch

    if isinstance(value, list):
        value = [_number(v) for v in value]
        return sum(value) / len(value) if value else None
    if isinstance(value, torch.Tensor):
        return float(value.float().mean())
    try:
        return float(value)
    except (TypeError, ValueError):
        return str(value)


def main(scenarios_path: str, out: str) -> int:
    out_dir = Path(out)
    model_path = out_dir / "tiny-qwen2"
    if not model_path.exists():
        build_model(model_path)
    results = {}
    start = time.perf_counter()
    scenarios = json.loads(Path(scenarios_path).read_text())
    device = selected_device()
    rounds = int(os.environ.get("VERL_ACTOR_RUN_ROUND_ROBIN", "0"))
    if rounds:
        results = run_round_robin(model_path, scenarios, out_dir, rounds, device)
        scenarios = []
    for scenario in scenarios:
        try:
            results[scenario["name"]] = run_scenario(model_path, scenario, out_dir, device)
        except Exception as exc:  # recorded per scenario: a refusal is an expected outcome of some
            results[scenario["name"]] = {"error": f"{type(exc).__name__}: {exc}", "trace": traceback.format_exc()}
    results["_device"] = device
    results["_total_seconds"] = time.perf_counter() - start
    (out_dir / "results.json").write_text(json.dumps(results, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main(*sys.argv[1:3]))
