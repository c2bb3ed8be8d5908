"""The `hf_cpu` rollout in bf16 vs fp32 on this CPU: generation tokens/s, the log-prob pass, the mismatch.

`python benchmarks/bench_rollout_precision.py [--model-dir models/smollm2-135m] [--data data/chain_sum_small]
[--threads 1] [--repeats 3]`. In one process, alternating the two dtypes `--repeats` times (median kept):

- generation: the rollout's own `generate_batch` (cancelctl/backends/verl/cpu/generator.py) on a step's
  requests — 8 chain_sum prompts × G 4, temperature 1, 24 new tokens each (stop tokens off, so both
  dtypes generate the same number of tokens) — in generated tokens per second;
- the log-prob pass: one teacher-forced forward over the same 32 prompt + response rows and
  log_softmax of the chosen tokens (what verl's old-log-prob recompute does), in tokens per second;
- the mismatch it makes ([H] eq. 5): each rollout's log-probs of its own samples against an fp32
  recompute of the same tokens with the same weights — mean |Δ log π| and std of ρ = π_train / π_rollout
  (an fp32 rollout differs from it only by batching and KV-cache rounding).

Threads: 1 by default, as every process of a verl run on CPU gets (verl sets OMP_NUM_THREADS=1 in its
workers). bf16 is fast only where the CPU has bf16 matmul kernels (AVX512-BF16, AMX); elsewhere torch
emulates them (on CI's EPYC without them, ~7× slower than fp32). The flags found are printed.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from cancelctl.backends.verl.cpu.generator import Request, generate_batch  # noqa: E402
from cancelctl.backends.verl.cpu.rollout import load_model  # noqa: E402

CPU_FLAGS = ("avx512f", "avx512_bf16", "amx_bf16", "amx_tile")


def cpu_flags() -> str:
    try:
        text = Path("/proc/cpuinfo").read_text()
    except OSError:
        return "unknown"
    model = next((line.split(":", 1)[1].strip() for line in text.splitlines() if line.startswith("model name")), "?")
    flags = set(next((line.split(":", 1)[1].split() for line in text.splitlines() if line.startswith("flags")), []))
    return f"{model}; " + ", ".join(f"{f} {'yes' if f in flags else 'no'}" for f in CPU_FLAGS)


def step_prompts(tokenizer, data: Path, prompts: int, group: int) -> list[list[int]]:
    import pandas as pd

    rows = pd.read_parquet(data / "train.parquet").head(prompts)
    ids = [
        tokenizer.apply_chat_template(list(row.prompt), add_generation_prompt=True, tokenize=True)
        for row in rows.itertuples()
    ]
    ids = [list(x["input_ids"]) if isinstance(x, dict) or hasattr(x, "keys") else list(x) for x in ids]
    return [p for p in ids for _ in range(group)]


@torch.no_grad()
def log_prob_pass(model, prompts: list[list[int]], responses: list[list[int]], pad: int) -> torch.Tensor:
    """log π of each response token from one right-padded teacher-forced forward (fp32 log_softmax)."""
    rows = [p + r for p, r in zip(prompts, responses)]
    width = max(map(len, rows))
    ids = torch.full((len(rows), width), pad, dtype=torch.long)
    mask = torch.zeros_like(ids)
    for i, row in enumerate(rows):
        ids[i, : len(row)] = torch.tensor(row)
        mask[i, : len(row)] = 1
    logits = model(input_ids=ids, attention_mask=mask).logits.float()
    out = []
    for i, (p, r) in enumerate(zip(prompts, responses)):
        lp = torch.log_softmax(logits[i, len(p) - 1 : len(p) + len(r) - 1], -1)
        out.append(lp.gather(1, torch.tensor(r)[:, None]).squeeze(1))
    return torch.stack(out)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model-dir", type=Path, default=Path("models/smollm2-135m"))
    parser.add_argument("--data", type=Path, default=Path("data/chain_sum_small"))
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--prompts", type=int, default=8)
    parser.add_argument("--group", type=int, default=4)
    parser.add_argument("--tokens", type=int, default=24)
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(args.model_dir)
    prompts = step_prompts(tokenizer, args.data, args.prompts, args.group)
    pad = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else 0
    models = {dtype: load_model(str(args.model_dir), dtype=dtype).eval() for dtype in (torch.float32, torch.bfloat16)}
    requests = [Request(p, max_tokens=args.tokens, temperature=1.0) for p in prompts]
    print(f"CPU: {cpu_flags()}; torch {torch.__version__}, {torch.get_num_threads()} thread(s)")
    print(f"{len(requests)} requests ({args.prompts} prompts x G {args.group}), prompt "
          f"{min(map(len, prompts))}-{max(map(len, prompts))} tokens, {args.tokens} new tokens each")
    gen_s: dict[torch.dtype, list[float]] = {d: [] for d in models}
    lp_s: dict[torch.dtype, list[float]] = {d: [] for d in models}
    samples = {}
    for repeat in range(args.repeats + 1):  # the first round warms up (kernel selection, allocation)
        for dtype, model in models.items():
            start = time.perf_counter()
            out = generate_batch(model, requests, pad_token_id=pad, generator=torch.Generator().manual_seed(repeat))
            mid = time.perf_counter()
            log_prob_pass(model, prompts, [o.token_ids for o in out], pad)
            end = time.perf_counter()
            if repeat:
                gen_s[dtype].append(mid - start)
                lp_s[dtype].append(end - mid)
            samples[dtype] = out
    new_tokens = len(requests) * args.tokens
    pass_tokens = sum(len(p) + args.tokens for p in prompts)
    rates = {}
    for dtype in models:
        g, lp = statistics.median(gen_s[dtype]), statistics.median(lp_s[dtype])
        rates[dtype] = (new_tokens / g, pass_tokens / lp)
        print(f"{str(dtype).removeprefix('torch.'):>9}: generation {g:6.2f} s = {new_tokens / g:7.1f} new tokens/s; "
              f"log-prob pass {lp:5.2f} s = {pass_tokens / lp:7.0f} tokens/s  (median of {args.repeats})")
    (g32, lp32), (g16, lp16) = rates[torch.float32], rates[torch.bfloat16]
    print(f"bf16 / fp32 speed: generation {g16 / g32:.2f}x, log-prob pass {lp16 / lp32:.2f}x")
    for dtype, out in samples.items():
        rollout_lp = torch.tensor([o.log_probs for o in out])
        trainer_lp = log_prob_pass(models[torch.float32], prompts, [o.token_ids for o in out], pad)
        rho = (trainer_lp - rollout_lp).exp()
        print(f"mismatch of a {str(dtype).removeprefix('torch.')} rollout vs the fp32 trainer (same weights, its own "
              f"samples): mean |dlogp| {(trainer_lp - rollout_lp).abs().mean():.2e}, std(rho) {rho.std():.2e}, "
              f"max rho {rho.max():.4f}")


if __name__ == "__main__":
    main()
