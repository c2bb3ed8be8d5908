"""The GPU-memory estimate (cancelctl.backends.verl.memory) against verl's real actor update, measured.

`python benchmarks/bench_memory.py [--shapes a,b] [--gc on,off]` (needs verl and transformers: CI's
verl venv). For each model shape and gradient-checkpointing setting a fresh subprocess builds a
random-weight Qwen2 from a config (no download), runs verl 0.9.1's own actor update on CPU in one
process — `ActorRolloutRefWorker(role="actor")`, FSDP2 engine, cancelctl's CPU platform, as
tests/backends/verl/verl_actor_run.py does — and measures its second `update_actor` (the first
creates AdamW's states): forward with logits over prompt + response tokens, log-probs, the policy
loss, backward over 2 micro-batches, gradient clipping and the AdamW step; then one
`compute_log_prob` with the entropy, as the trainer takes θ_old's log-probs (forward only).

Measured: the peak of torch's own allocations (the profiler's memory events, replayed: what
`torch.cuda.max_memory_allocated` is on a GPU), counted from before the model was built, and the
process's peak RSS over its RSS before the model (includes the allocator's slack; reset with
/proc/self/clear_refs before the measured step). Estimated: `memory.update_phases` for the same
setup as the CPU runs it (fp32, sdpa, torch's log-softmax, per-parameter AdamW, no torch.compile; no
CUDA runtime): its update peak (the larger of a backward and the step) against the update, its
log-prob peak against `compute_log_prob`.
Target: the estimate within ±25% of the measured torch peak.
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SUPPORT = ROOT / "tests" / "backends" / "verl"
TARGET = 0.25
# Two Qwen2-style shapes: a vocabulary-heavy small one (logits dominate, as in 0.5B models) and a
# deeper, wider one (layers dominate). Real Qwen2.5-0.5B is hidden 896, 24 layers, vocab 151936.
SHAPES = {
    "h256-L4-V32k": {"hidden_size": 256, "num_hidden_layers": 4, "num_attention_heads": 4, "num_key_value_heads": 2,
                     "intermediate_size": 704, "vocab_size": 32000},
    "h768-L8-V8k": {"hidden_size": 768, "num_hidden_layers": 8, "num_attention_heads": 12, "num_key_value_heads": 4,
                    "intermediate_size": 2048, "vocab_size": 8192},
}
PROMPT, RESPONSE = 128, 384  # tokens a row; every row at full length (no padding)
MICRO_ROWS, MICRO_BATCHES = 2, 2  # rows of a micro-batch; micro-batches of the measured mini-batch


def qwen2_config(shape: dict) -> dict:
    return {"architectures": ["Qwen2ForCausalLM"], "model_type": "qwen2", "hidden_act": "silu", "rms_norm_eps": 1e-6,
            "max_position_embeddings": PROMPT + RESPONSE, "tie_word_embeddings": False, "torch_dtype": "float32",
            "pad_token_id": shape["vocab_size"] - 2, "eos_token_id": shape["vocab_size"] - 1,
            "bos_token_id": shape["vocab_size"] - 1, **shape}


# ---------------------------------------------------------------- the estimate


def estimated(shape: dict, gradient_checkpointing: bool) -> dict[str, float]:
    """The update's peaks as the CPU runs it (world size 1, no CUDA runtime reserve)."""
    sys.path.insert(0, str(ROOT))
    from cancelctl.backends.verl.memory import FP32, TrainingSetup, update_phases
    from cancelctl.backends.verl.model_shape import ModelShape

    tokens = MICRO_ROWS * (PROMPT + RESPONSE)
    setup = TrainingSetup(strategy="fsdp2", gpus=1, micro_batch_tokens=tokens, log_prob_tokens=tokens,
                          compute_bytes=FP32, gradient_checkpointing=gradient_checkpointing, attention="sdpa",
                          flash_cross_entropy=False, compiled_entropy=False, foreach_optimizer=False)
    return {name: phase.total for name, phase in update_phases(ModelShape.from_config(qwen2_config(shape)), setup).items()}


# ---------------------------------------------------------------- the measured run (subprocess)


def _rss(field: str) -> int:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1]) * 1024
    return 0


def _torch_peak(prof, window: str) -> tuple[int, int]:
    """(live bytes when `window` began, peak live bytes inside it) from the profiler's memory events."""
    events = list(prof.profiler.kineto_results.events())
    marks = [e for e in events if e.name() == window]
    start, end = marks[0].start_ns(), marks[0].start_ns() + marks[0].duration_ns()
    live = peak = at_start = 0
    for e in sorted((e for e in events if e.name() == "[memory]"), key=lambda e: e.start_ns()):
        if e.start_ns() > end:
            break
        live += e.nbytes()
        if e.start_ns() < start:
            at_start = live
        else:
            peak = max(peak, live)
    return at_start, max(peak, at_start)


def worker(case_path: str, out_path: str) -> int:
    import torch
    from hydra import compose, initialize_config_dir
    from omegaconf import OmegaConf, open_dict
    from torch.profiler import ProfilerActivity, profile, record_function

    sys.path.insert(0, str(SUPPORT))
    import verl
    from verl import DataProto
    from verl.utils import tensordict_utils as tu
    from verl.workers.engine_workers import ActorRolloutRefWorker
    from verl.workers.utils.padding import left_right_2_no_padding
    from verl_actor_run import BASE_LINES, PRECISION_LINES

    case = json.loads(Path(case_path).read_text())
    torch.distributed.init_process_group(backend="gloo", rank=0, world_size=1)
    config_dir = Path(verl.__file__).parent / "trainer" / "config"
    with initialize_config_dir(config_dir=str(config_dir), version_base=None):
        cfg = compose(config_name="ppo_trainer", overrides=BASE_LINES + PRECISION_LINES["cpu"])
    rows = MICRO_ROWS * MICRO_BATCHES
    settings = {"model.path": case["model"], "model.enable_gradient_checkpointing": case["gc"],
                "rollout.n": rows, "actor.ppo_mini_batch_size": 1, "actor.ppo_micro_batch_size_per_gpu": MICRO_ROWS,
                "rollout.log_prob_micro_batch_size_per_gpu": MICRO_ROWS,
                "actor.optim.optimizer": "AdamW", "actor.optim.lr": 1e-6, "actor.optim.clip_grad": 1.0,
                "actor.policy_loss.loss_mode": "vanilla"}
    with open_dict(cfg):
        for key, value in settings.items():
            OmegaConf.update(cfg, f"actor_rollout_ref.{key}", value, force_add=True)
    OmegaConf.resolve(cfg)

    vocab = case["vocab"]
    gen = torch.Generator().manual_seed(0)
    prompts = torch.randint(0, vocab - 3, (rows, PROMPT), generator=gen)
    responses = torch.randint(0, vocab - 3, (rows, RESPONSE), generator=gen)
    mask = torch.ones(rows, PROMPT + RESPONSE, dtype=torch.long)
    batch = DataProto.from_dict(tensors={
        "prompts": prompts, "responses": responses, "input_ids": torch.cat([prompts, responses], 1),
        "attention_mask": mask, "position_ids": torch.arange(PROMPT + RESPONSE).expand(rows, -1).clone(),
        "response_mask": torch.ones(rows, RESPONSE, dtype=torch.long),
        "advantages": torch.randn(rows, 1, generator=gen).expand(rows, RESPONSE).clone(),
        "old_log_probs": torch.full((rows, RESPONSE), -float(torch.log(torch.tensor(float(vocab))))),
    }, non_tensors={"uid": ["q0"] * rows})

    def update():
        td = left_right_2_no_padding(batch.to_tensordict())
        tu.assign_non_tensor(td, calculate_entropy=False, distillation_use_topk=False, distillation_only=False,
                             global_batch_size=rows, mini_batch_size=rows, epochs=1, seed=0,
                             dataloader_kwargs={"shuffle": False}, compute_loss=True, temperature=1.0)
        return actor.update_actor(td)

    rss_before = _rss("VmRSS")
    with profile(activities=[ProfilerActivity.CPU], profile_memory=True) as prof:
        actor = ActorRolloutRefWorker(config=cfg.actor_rollout_ref, role="actor")
        actor.init_model()
        update()  # the first step creates AdamW's states
        Path("/proc/self/clear_refs").write_text("5")  # the peak RSS from here on
        start = time.perf_counter()
        with record_function("measured_update"):
            update()
        seconds = time.perf_counter() - start
        rss_update = _rss("VmHWM") - rss_before
        Path("/proc/self/clear_refs").write_text("5")
        td = left_right_2_no_padding(batch.to_tensordict())
        tu.assign_non_tensor(td, calculate_entropy=True, calculate_sum_pi_squared=False, compute_loss=False,
                             temperature=1.0)
        with record_function("measured_log_prob"):
            actor.compute_log_prob(td)
    out = {"seconds": seconds}
    for name, rss in (("update", rss_update), ("log_prob", _rss("VmHWM") - rss_before)):
        at_start, peak = _torch_peak(prof, f"measured_{name}")
        out[name] = {"torch_peak": peak, "torch_at_start": at_start, "rss_peak": rss}
    Path(out_path).write_text(json.dumps(out))
    return 0


# ---------------------------------------------------------------- driver


def measure(name: str, shape: dict, gc: bool, tmp: Path) -> dict:
    from transformers import Qwen2Config, Qwen2ForCausalLM

    model = tmp / name
    if not model.exists():
        import torch
        from tokenizers import Tokenizer, models, pre_tokenizers
        from transformers import PreTrainedTokenizerFast

        vocab = {f"t{i}": i for i in range(shape["vocab_size"] - 3)} | {
            "<unk>": shape["vocab_size"] - 3, "<pad>": shape["vocab_size"] - 2, "<eos>": shape["vocab_size"] - 1}
        tok = Tokenizer(models.WordLevel(vocab=vocab, unk_token="<unk>"))
        tok.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
        PreTrainedTokenizerFast(tokenizer_object=tok, unk_token="<unk>", pad_token="<pad>",
                                eos_token="<eos>").save_pretrained(model)
        torch.manual_seed(0)
        Qwen2ForCausalLM(Qwen2Config(**qwen2_config(shape))).save_pretrained(model)
    case, out = tmp / f"{name}-{gc}.json", tmp / f"{name}-{gc}.out.json"
    case.write_text(json.dumps({"model": str(model), "gc": gc, "vocab": shape["vocab_size"]}))
    from verl_actor_run import cpu_env

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    env = dict(os.environ, **cpu_env(port), PYTHONPATH=os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")])))
    proc = subprocess.run([sys.executable, __file__, "--worker", str(case), str(out)], env=env,
                          capture_output=True, text=True, timeout=1800)
    if proc.returncode:
        raise RuntimeError(f"{name} gc={gc}: worker failed\n{proc.stderr[-3000:]}")
    return json.loads(out.read_text())


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--shapes", default=",".join(SHAPES), help=f"of {', '.join(SHAPES)}")
    parser.add_argument("--gc", default="off,on", help="gradient checkpointing settings to run")
    parser.add_argument("--worker", nargs=2, metavar=("CASE", "OUT"), help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.worker:
        return worker(*args.worker)
    sys.path.insert(0, str(SUPPORT))
    mib = 2**20
    rows, worst = [], 0.0
    with tempfile.TemporaryDirectory() as tmp:
        for name in args.shapes.split(","):
            for gc in (g == "on" for g in args.gc.split(",")):
                measured = measure(name, SHAPES[name], gc, Path(tmp))
                phases = estimated(SHAPES[name], gc)
                if os.environ.get("BENCH_MEMORY_DEBUG"):
                    print(name, gc, {k: round(v / mib) for k, v in phases.items()}, measured, file=sys.stderr)
                update = max(phases["update"], phases["optimizer step"])
                for what, estimate in (("update", update), ("log_prob", phases["log-prob"])):
                    ratio = estimate / measured[what]["torch_peak"]
                    worst = max(worst, abs(ratio - 1))
                    rows.append((name, "on" if gc else "off", what.replace("_", "-"), estimate / mib,
                                 measured[what]["torch_peak"] / mib, measured[what]["rss_peak"] / mib, ratio))
    tokens = MICRO_ROWS * (PROMPT + RESPONSE)
    print(f"verl 0.9.1 actor on CPU (FSDP2, fp32, sdpa, AdamW), world size 1: update over {MICRO_BATCHES} micro-batches, "
          f"log-prob (with entropy) over 1, each of {MICRO_ROWS} rows x {PROMPT}+{RESPONSE} tokens ({tokens} tokens)")
    print(f"{'shape':<14} {'gc':<4} {'pass':<9} {'estimate MiB':>12} {'torch peak MiB':>14} {'RSS peak MiB':>12} "
          f"{'est/torch':>9}")
    for name, gc, what, est, peak, rss, ratio in rows:
        print(f"{name:<14} {gc:<4} {what:<9} {est:>12.0f} {peak:>14.0f} {rss:>12.0f} {ratio:>9.2f}")
    ok = worst <= TARGET
    print(f"worst |estimate/measured - 1| = {worst:.2f} (target <= {TARGET:.2f}): {'ok' if ok else 'MISSED'}")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
